"""The wheels of kgrpc and kgrpc-native, built once per test run from a clean clone of the
checkout, for the packaging tests (tests/test_native_build.py, tests/test_dist_install.py).

Each build is pip's own (``pip wheel``, build isolation on: only the build requirements each
pyproject.toml declares), from a fresh ``git clone`` with the working tree's tracked files
copied over: what CI's checkout and a volunteer's clone hold, nothing untracked. The native
wheel is a full release build of native/ from scratch, the slowest step of the suite (a
minute or two on 2 busy cores), so the tests that need a wheel share these builds rather than
each making its own. pytest-xdist's workers are separate processes: the first to ask for a
step does it under a file lock in the run's shared temporary folder; the others wait and read
its outcome (a failed build is reported to each, not tried again).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# pip wheel of native/ from scratch; the packaging tests' own timeouts allow for it.
BUILD_TIMEOUT_S = 1200


@dataclass(frozen=True)
class WheelBuild:
    """One ``pip wheel`` of a project of the clean clone into :attr:`wheels`."""

    wheels: Path  # the folder the wheels of both projects go to
    returncode: int
    output: str  # the tail of pip's stdout and stderr
    # native/ had no build folder before its build (so nothing was reused)
    from_scratch: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def _shared_dir(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()
    # Under xdist each worker's basetemp (pytest-N/popen-gwK) is inside the run's folder.
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): each process builds for itself
        yield
        return
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # released when f closes, or when the process dies


def _once(root: Path, step: str, work: Callable[[], dict]) -> dict:
    """``work()``'s JSON outcome, done by the first process of the run to ask."""
    done = root / f"{step}.json"
    with _locked(root / f"{step}.lock"):
        if not done.exists():
            part = done.with_suffix(".part")
            part.write_text(json.dumps(work()))
            part.replace(done)  # a process killed mid-step leaves no outcome behind
        return json.loads(done.read_text())


def _clean_clone(clone: Path) -> dict:
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
    return {"native_build_dir": (clone / "native" / "build").exists()}


def _pip_wheel(project: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(project)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    return {"returncode": proc.returncode, "output": proc.stdout[-3000:] + proc.stderr[-3000:]}


def clean_clone_wheel(factory: pytest.TempPathFactory, project: str) -> WheelBuild:
    """The wheel of ``project`` (``"."``: kgrpc, ``"native"``: kgrpc-native) built from this
    run's clean clone; the clone and each wheel are made once per run."""
    root = _shared_dir(factory) / "clean-clone-wheels"
    root.mkdir(exist_ok=True)
    clone, wheels = root / "clone", root / "wheels"
    cloned = _once(root, "clone", lambda: _clean_clone(clone))
    step = "kgrpc" if project == "." else project
    built = _once(root, f"wheel-{step}", lambda: _pip_wheel(clone / project, wheels))
    return WheelBuild(wheels, built["returncode"], built["output"], not cloned["native_build_dir"])
