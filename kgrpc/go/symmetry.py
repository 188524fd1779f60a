"""The eight board symmetries (docs/formats.md section 3).

``sym = 4 * flip + rot``: rotate by ``rot`` quarter turns (``np.rot90`` on the last two axes),
then transpose the last two axes when ``flip``. Planes are ``[..., N, N]``, ownership
``[..., N*N]`` and policy vectors ``[..., N*N+1]`` (the pass entry does not move).
"""

from __future__ import annotations

from functools import cache

import numpy as np

NUM_SYMMETRIES = 8


def _check(sym: int) -> tuple[int, int]:
    if not 0 <= sym < NUM_SYMMETRIES:
        raise ValueError(f"symmetry {sym} out of range 0..7")
    return divmod(sym, 4)


def apply_planes(x: np.ndarray, sym: int) -> np.ndarray:
    flip, rot = _check(sym)
    y = np.rot90(x, rot, axes=(-2, -1))
    if flip:
        y = np.swapaxes(y, -1, -2)
    return np.ascontiguousarray(y)


def apply_ownership(o: np.ndarray, sym: int, size: int) -> np.ndarray:
    o = np.asarray(o)
    lead = o.shape[:-1]
    return apply_planes(o.reshape(*lead, size, size), sym).reshape(*lead, size * size)


def apply_policy(p: np.ndarray, sym: int, size: int) -> np.ndarray:
    p = np.asarray(p)
    nn = size * size
    if p.shape[-1] != nn + 1:
        raise ValueError(f"policy has {p.shape[-1]} entries, expected {nn + 1} for {size}x{size}")
    out = np.empty_like(p)
    out[..., :nn] = apply_ownership(p[..., :nn], sym, size)
    out[..., nn] = p[..., nn]
    return out


def inverse(sym: int) -> int:
    flip, rot = _check(sym)
    # A rotation followed by a transpose is a reflection: its own inverse.
    return sym if flip else (4 - rot) % 4


@cache
def _point_map(sym: int, size: int) -> tuple[int, ...]:
    """new_index[old_index] under the symmetry, pass mapped to pass."""
    nn = size * size
    source = apply_planes(np.arange(nn).reshape(size, size), sym).ravel()
    new_index = np.empty(nn + 1, dtype=np.int64)
    new_index[source] = np.arange(nn)
    new_index[nn] = nn
    return tuple(new_index.tolist())


def apply_move(move: int, sym: int, size: int) -> int:
    """Where point ``move`` goes under the symmetry (pass stays pass)."""
    _check(sym)
    return _point_map(sym, size)[move]
