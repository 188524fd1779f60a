"""Packaging of the native core (slow: each test builds or installs from scratch).

* The wheel of ``native/`` builds from a clean clone (what CI and a volunteer do).
* The core package alone, in a fresh venv without the extension, runs its pure-Python engine:
  ``kgrpc-gtp --model none`` plays and ``kgrpc-worker --help`` starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _clean_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    # The working tree's uncommitted state is what is under test: copy the tracked files over.
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, tracked):
        src = ROOT / name
        if src.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / name)
    return clone


@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="no C++ compiler on this machine",
)
def test_wheel_builds_from_a_clean_clone(tmp_path: Path) -> None:
    clone = _clean_clone(tmp_path)
    assert not (clone / "native" / "build").exists()
    out = tmp_path / "wheels"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(out),
            str(clone / "native"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(out.glob("kgrpc_native-*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert any(n.startswith("kgrpc_native.") and n.endswith((".so", ".pyd")) for n in names)


def test_core_package_without_the_extension(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    clone = _clean_clone(tmp_path)
    proc = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(clone)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k != "KGRPC_NATIVE"}
    check = subprocess.run(
        [str(py), "-c", "import kgrpc.native as n; print(n.describe())"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert check.returncode == 0 and "pure Python" in check.stdout, check.stderr
    gtp = subprocess.run(
        [str(bindir / "kgrpc-gtp"), "--model", "none"],
        input="boardsize 9\nclear_board\ngenmove b\nquit\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert gtp.returncode == 0, gtp.stderr[-2000:]
    replies = [line for line in gtp.stdout.splitlines() if line.startswith("=")]
    assert len(replies) == 4 and replies[2] != "=", gtp.stdout
    worker = subprocess.run(
        [str(bindir / "kgrpc-worker"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert worker.returncode == 0 and "usage" in worker.stdout.lower(), worker.stderr[-2000:]
