"""`make test-native-debug` runs the native differential tests on a build with the search's
invariant checks on (KGRPC_NATIVE_DEBUG): this test makes sure that build is the one loaded,
so the run cannot pass on the release extension by mistake."""

from __future__ import annotations

import os

import pytest

from kgrpc import native

EXPECTED = os.environ.get("KGRPC_NATIVE_DEBUG_EXPECTED") == "1"


@pytest.mark.skipif(not native.ENABLED, reason="kgrpc-native is not installed")
def test_the_loaded_extension_is_the_build_asked_for() -> None:
    # A release build reports its checks off (compiled out); the debug run asks for them on.
    assert native.ext.DEBUG_CHECKS is EXPECTED, (
        f"kgrpc_native at {native.ext.__file__}: DEBUG_CHECKS is {native.ext.DEBUG_CHECKS}"
    )
