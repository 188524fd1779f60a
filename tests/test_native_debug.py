"""`make test-native-debug` runs the native differential tests on a build with the board's and
the search's invariant checks on (KGRPC_NATIVE_DEBUG; `make test` runs those not marked slow
the same way). These tests make sure that build is the one loaded and that its checks fire,
so the run cannot pass on the release extension, or on a build whose checks were compiled
out, by mistake."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from kgrpc import native

EXPECTED = os.environ.get("KGRPC_NATIVE_DEBUG_EXPECTED") == "1"

pytestmark = pytest.mark.skipif(not native.ENABLED, reason="kgrpc-native is not installed")


def test_the_loaded_extension_is_the_build_asked_for() -> None:
    # A release build reports its checks off (compiled out); the debug run asks for them on.
    assert native.ext.DEBUG_CHECKS is EXPECTED, (
        f"kgrpc_native at {native.ext.__file__}: DEBUG_CHECKS is {native.ext.DEBUG_CHECKS}"
    )


@pytest.mark.skipif(EXPECTED, reason="the debug build has the probe")
def test_the_release_build_has_no_failing_probe() -> None:
    assert not hasattr(native.ext, "_fail_dcheck")


@pytest.mark.skipif(not EXPECTED, reason="only the debug build's checks are on")
def test_a_violated_check_aborts_the_debug_build() -> None:
    # In a child process: a failed check aborts the process, as it would in the search. The
    # child imports the same build (it inherits PYTHONPATH); the probe first holds, then fails.
    code = (
        "import kgrpc_native as m\n"
        "print(m.__file__, flush=True)\n"
        "m._fail_dcheck(False)\n"
        "print('held', flush=True)\n"
        "m._fail_dcheck(True)\n"
        "print('not aborted', flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == [native.ext.__file__, "held"], proc.stdout + proc.stderr
    assert proc.returncode == -signal.SIGABRT, proc.stderr
    assert "Assertion `!fail' failed" in proc.stderr, proc.stderr
