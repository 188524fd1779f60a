"""The shipped networks (kgrpc/networks.py, networks/networks.toml): every listed file is there
with the listed sha256, ``kgrpc-gtp --model NAME`` plays with it, and an unknown name or a
damaged file is refused with a message saying so (exit 2), before any model is loaded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kgrpc import networks

ROOT = Path(__file__).resolve().parents[1]


def _gtp(args: list[str], commands: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "kgrpc.programs.gtp", *args],
        input=commands,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_the_checkout_lists_its_networks_with_matching_files() -> None:
    assert networks.list_dir() == ROOT / "networks"
    shipped = networks.shipped()
    assert "kg9" in shipped, shipped
    for net in shipped.values():
        assert net.path.parent == ROOT / "networks"
        assert networks.file_sha256(net.path) == net.sha256, net.name
        assert net.board_size == 9 and net.made_by.startswith("kgrpc-cluster")
        assert (ROOT / net.report).exists(), f"{net.name}: report {net.report} missing"
    assert networks.resolve("kg9") == str(shipped["kg9"].path)


def test_paths_and_none_pass_through_unchanged(tmp_path: Path) -> None:
    assert networks.resolve("none") == "none"
    assert networks.resolve("some/model.onnx") == "some/model.onnx"
    here = tmp_path / "plain"
    here.write_bytes(b"x")
    assert networks.resolve(str(here)) == str(here)


def test_kgrpc_gtp_plays_the_shipped_network_by_its_name() -> None:
    pytest.importorskip("onnxruntime")
    proc = _gtp(["--model", "kg9", "--visits", "8", "--seed", "1"], "boardsize 9\ngenmove b\n")
    assert proc.returncode == 0, proc.stderr
    assert "model " + str(ROOT / "networks") in proc.stderr, proc.stderr
    answers = [a for a in proc.stdout.split("\n\n") if a.strip()]
    assert answers[0] == "=" and answers[1].startswith("= "), proc.stdout
    assert answers[1][2:].strip().upper() not in ("", "RESIGN"), proc.stdout


def test_an_unknown_name_is_refused_with_the_shipped_list() -> None:
    proc = _gtp(["--model", "kg99"], "quit\n")
    assert proc.returncode == 2
    assert "'kg99' is neither an .onnx file nor a shipped network" in proc.stderr
    assert "kg9 (9x9" in proc.stderr and "Traceback" not in proc.stderr


def test_a_damaged_network_file_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "networks"
    shutil.copytree(ROOT / "networks", copy)
    target = copy / networks.shipped()["kg9"].path.name
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF  # one flipped byte at the end of the weights
    target.write_bytes(bytes(data))
    proc = _gtp(["--model", "kg9"], "quit\n", env={networks.ENV_DIR: str(copy)})
    assert proc.returncode == 2
    assert "the file is damaged or replaced" in proc.stderr, proc.stderr
