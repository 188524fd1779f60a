"""The volunteer's install from wheels (docs/worker.md, "Installing"): the wheels of kgrpc and
kgrpc-native, built from a clean clone with the build backends ``make dist`` uses (once per run,
shared with tests/test_native_build.py: tests/wheel_helpers.py), installed into a fresh venv
with the documented ``pip install --find-links DIR "kgrpc[native]"``; the programs then run
from that venv alone, with the native core and without torch or ONNX Runtime (the worker's
core)."""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import pytest

import kgrpc
from tests.wheel_helpers import clean_clone_wheel

ROOT = Path(__file__).resolve().parents[1]
# Installs the two wheels with their dependencies (from pip's cache or index): tens of seconds,
# minutes on a loaded machine, plus the native build from scratch if no test has made it yet.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(cmd: list[str], cwd: Path, timeout: float = 600, **kw: object) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for project in (".", "native"):
        build = clean_clone_wheel(tmp_path_factory, project)
        assert build.ok, f"pip wheel {project}:\n{build.output}"
    return build.wheels


def test_the_wheels_install_into_a_fresh_venv_and_the_programs_run(
    wheels: Path, tmp_path: Path
) -> None:
    names = sorted(p.name for p in wheels.glob("*.whl"))
    assert [n.split("-")[0] for n in names] == ["kgrpc", "kgrpc_native"], names
    assert all(f"-{kgrpc.__version__}-" in n for n in names)

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    pip = [str(bin_dir / "python"), "-m", "pip"]
    # The documented command, pinned like `make install` so pip takes what it already has.
    _run(
        [*pip, "install", "-q", "-c", str(ROOT / "constraints.txt")]
        + ["--find-links", str(wheels), "kgrpc[native]"],
        cwd=tmp_path,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KGRPC_", "PYTHON"))}
    run = {"cwd": tmp_path, "env": env}  # (not the checkout: its sources must not be found)

    help_text = _run([str(bin_dir / "kgrpc-worker"), "--help"], **run)
    assert "--coordinator" in help_text and "--max-batch" in help_text
    version = _run([str(bin_dir / "kgrpc-worker"), "--version"], **run).splitlines()
    assert version == [
        f"kgrpc-worker {kgrpc.__version__}",
        "Go engine and search: native (kgrpc-native 0.1.0)",
    ]
    where = _run([str(bin_dir / "python"), "-c", "import kgrpc; print(kgrpc.__file__)"], **run)
    assert str(env_dir) in where, where
    installed = _run([*pip, "list", "--format=freeze"], **run).lower()
    for heavy in ("torch", "onnxruntime", "onnx=="):
        assert heavy not in installed, f"the worker's core install pulled {heavy}"

    # kgrpc-gtp (random play without a model) answers a GUI's first commands.
    gtp = subprocess.run(
        [str(bin_dir / "kgrpc-gtp")],
        input="boardsize 9\nfixed_handicap 2\ngenmove w\nquit\n",
        capture_output=True,
        text=True,
        timeout=120,
        **run,
    )
    assert gtp.returncode == 0, gtp.stderr
    answers = [a for a in gtp.stdout.split("\n\n") if a.strip()]
    assert answers[:2] == ["=", "= C3 G7"] and answers[2].startswith("= "), gtp.stdout

    # With ONNX Runtime added (the `inference` extra), the shipped network plays by its name,
    # found where the wheel installed it, outside any checkout.
    _run(
        [*pip, "install", "-q", "-c", str(ROOT / "constraints.txt")]
        + ["--find-links", str(wheels), "kgrpc[native,inference]"],
        cwd=tmp_path,
    )
    gtp = subprocess.run(
        [str(bin_dir / "kgrpc-gtp"), "--model", "kg9", "--visits", "8"],
        input="boardsize 9\ngenmove b\nquit\n",
        capture_output=True,
        text=True,
        timeout=120,
        **run,
    )
    assert gtp.returncode == 0, gtp.stderr
    assert f"model {env_dir}" in gtp.stderr, gtp.stderr  # share/kgrpc/networks of the venv
    answers = [a for a in gtp.stdout.split("\n\n") if a.strip()]
    assert answers[0] == "=" and answers[1].startswith("= "), gtp.stdout
