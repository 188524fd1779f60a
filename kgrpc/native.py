"""Which implementation of the Go engine and the search runs: native or pure Python.

The optional distribution ``kgrpc-native`` (folder ``native/``, module ``kgrpc_native``) holds
a C++ board, feature encoder, random playouts, record replay and self-play search. When it is
installed, :mod:`kgrpc.go.board` exports its board as ``Board`` and :mod:`kgrpc.go.features`,
:mod:`kgrpc.go.playout` and :mod:`kgrpc.records.replay` use its functions; the pure-Python code
stays as the reference (``kgrpc.go.board.PyBoard``) and as the fallback. ``KGRPC_NATIVE=0`` in the
environment forces Python; an extension built for another API version, or whose input
encoding (``FEATURE_VERSION``, ``NUM_PLANES``, ``NUM_GLOBALS``) differs from kgrpc/schema.py's,
is ignored with a warning saying to rebuild it, so a stale build never runs. See
docs/native.md.
"""

from __future__ import annotations

import logging
import os
import random
from types import ModuleType

from kgrpc.schema import FEATURE_VERSION, INPUT_FEATURES, InputFeatures

ENV_VAR = "KGRPC_NATIVE"
API_VERSION = 9  # what this kgrpc expects of kgrpc_native.API_VERSION

log = logging.getLogger("kgrpc.native")


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV_VAR, "").strip() == "0":
        return None, f"{ENV_VAR}=0"
    try:
        import kgrpc_native
    except ImportError as exc:
        return None, f"kgrpc-native is not installed ({exc})"
    why = refusal(kgrpc_native)
    if why is not None:
        log.warning("%s", why)
        return None, why
    return kgrpc_native, f"kgrpc-native {kgrpc_native.__version__}"


def refusal(
    module: ModuleType,
    features: InputFeatures = INPUT_FEATURES,
    feature_version: int = FEATURE_VERSION,
) -> str | None:
    """Why the extension ``module`` cannot run with this kgrpc (None: it can): another API
    version, or another input encoding than ``features`` of ``feature_version``."""
    expected = {
        "API_VERSION": API_VERSION,
        "FEATURE_VERSION": feature_version,
        "NUM_PLANES": features.num_planes,
        "NUM_GLOBALS": features.num_globals,
    }
    wrong = [
        f"{name} {getattr(module, name, None)} (kgrpc expects {want})"
        for name, want in expected.items()
        if getattr(module, name, None) != want
    ]
    if not wrong:
        return None
    return (
        f"kgrpc_native at {getattr(module, '__file__', '?')} was built from other sources: "
        f"{', '.join(wrong)}; ignored, the pure-Python engine runs instead (rebuild it: "
        "make install)"
    )


ext, _why = _load()
ENABLED = ext is not None
IMPLEMENTATION = "native" if ENABLED else "python"


def _random_layout_ok() -> bool:
    """Can the extension read and advance a random.Random in place (CPython's layout)?"""
    if ext is None:
        return False
    probe = random.Random(20240611)
    probe.random()
    try:
        return bool(ext.random_layout_matches(probe, probe.getstate()[1]))
    except Exception:  # any surprise: use the getstate()/setstate() path
        return False


RANDOM_IN_PLACE = _random_layout_ok()


def describe() -> str:
    """One line: which implementation runs, and why."""
    if ENABLED:
        return f"Go engine and search: native ({_why})"
    return f"Go engine and search: pure Python ({_why})"


_logged = False


def log_implementation(logger: logging.Logger | None = None, *, force: bool = False) -> None:
    """Log :func:`describe` once per process (daemons call it after configuring logging)."""
    global _logged
    if _logged and not force:
        return
    _logged = True
    (logger or log).info("%s", describe())


if logging.getLogger().handlers:
    log_implementation()
