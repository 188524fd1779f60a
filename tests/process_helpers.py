"""A coordinator as a real process, for the tests that kill and restart one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "kgrpc.coordinator", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


async def start_process(data_dir: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """A coordinator process on ``data_dir`` (``extra``: more flags); it and its address."""
    port_file = data_dir / "coordinator.port"
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "kgrpc.coordinator",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
            "--positions-per-shard",
            "400",
            "--validate-workers",
            "1",
            "--log-level",
            "WARNING",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):  # the port file appears once the server listens
        if port_file.exists() or proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
    return proc, port_file.read_text().strip()
