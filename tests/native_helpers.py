"""Shared by the tests/test_native_*.py differential tests: the skip marker and board pairs."""

from __future__ import annotations

import pytest

from kgrpc import native

needs_native = pytest.mark.skipif(
    not native.ENABLED,
    reason=f"native core not in use ({native.describe()}): build it with `make install`",
)
