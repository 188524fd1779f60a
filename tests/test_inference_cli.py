"""The kgrpc-inference daemon as a process: config, listening log line, serving, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inference.client import InferenceClient
from inference.config import load_config
from tests.inference_helpers import make_model, positions


def test_config_file_then_flags(tmp_path: Path) -> None:
    cfg_file = tmp_path / "inf.toml"
    cfg_file.write_text('[inference]\nmodels = ["a.onnx"]\nmax_batch = 32\ndevice = "cpu"\n')
    cfg = load_config(str(cfg_file), {"max_batch": 128, "listen": None})
    assert cfg.models == ["a.onnx"] and cfg.max_batch == 128 and cfg.device == "cpu"
    assert cfg.listen == "127.0.0.1:50061"
    with pytest.raises(ValueError, match="--model"):
        load_config(None, {})
    cfg_file.write_text('modles = ["a.onnx"]\n')
    with pytest.raises(ValueError, match="unknown keys"):
        load_config(str(cfg_file), {})


@pytest.mark.slow
async def test_daemon_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    model = make_model(tmp_path / "m.onnx", "kg-b1c8-s0-d0")
    log = tmp_path / "log.txt"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "inference",
                "--listen",
                "127.0.0.1:0",
                "--model",
                str(model),
                "--device",
                "cpu",
                "--log-every-s",
                "0.2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GRPC_VERBOSITY": "ERROR"},
        )
    try:
        addr = None
        for _ in range(600):
            m = re.search(r"listening on (\S+:\d+)", log.read_text())
            if m:
                addr = m.group(1)
                break
            assert proc.poll() is None, log.read_text()
            await asyncio.sleep(0.05)
        assert addr, log.read_text()
        async with InferenceClient(addr) as client:
            planes, g = positions(3, 9, 0)
            r = await client.evaluate(planes, g)
            assert r.model == "kg-b1c8-s0-d0" and r.policy.shape == (3, 82)
        await asyncio.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert proc.returncode == 0, log.read_text()
        text = log.read_text()
        assert "CPUExecutionProvider (requested --device cpu" in text
        assert "evals/s" in text and "shutting down" in text
    finally:
        if proc.poll() is None:
            proc.kill()
