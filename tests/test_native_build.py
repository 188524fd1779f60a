"""Packaging of the native core (slow: each test builds or installs from scratch).

* The wheel of ``native/`` builds from a clean clone (what CI and a volunteer do).
* The core package alone, its wheel from the same clean clone installed in a fresh venv
  without the extension, runs its pure-Python engine: ``kgrpc-gtp --model none`` plays and
  ``kgrpc-worker --help`` starts.

The clone and its wheels are built once per run (tests/wheel_helpers.py), shared with
tests/test_dist_install.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.wheel_helpers import clean_clone_wheel

ROOT = Path(__file__).resolve().parent.parent

# The native build from scratch (a minute or two on 2 busy cores) falls in whichever test of
# this file or test_dist_install.py asks first; the others of the run wait for it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="no C++ compiler on this machine",
)
def test_wheel_builds_from_a_clean_clone(tmp_path_factory: pytest.TempPathFactory) -> None:
    build = clean_clone_wheel(tmp_path_factory, "native")
    assert build.from_scratch  # no build folder of the checkout's came along
    assert build.ok, build.output
    wheels = list(build.wheels.glob("kgrpc_native-*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert any(n.startswith("kgrpc_native.") and n.endswith((".so", ".pyd")) for n in names)


def test_core_package_without_the_extension(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    build = clean_clone_wheel(tmp_path_factory, ".")
    assert build.ok, build.output
    (wheel,) = build.wheels.glob("kgrpc-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    proc = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(wheel)],
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
