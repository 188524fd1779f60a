"""The board's fixed tables: the colours, their byte codes, and the per-size constants.

Colours are ``BLACK = 1``, ``WHITE = -1``, ``EMPTY = 0`` (docs/formats.md). Inside the board a
point's colour is an unsigned byte (black 1, white 255 = -1 as int8; :mod:`kgrpc.go.board`).
:class:`_Geometry` holds what depends only on the board size (neighbours, diagonals, the eye
rule's diagonal limit, Zobrist keys) and is built once per size and shared by every board.
"""

from __future__ import annotations

import random
from functools import cache

import numpy as np

BLACK = 1
WHITE = -1
EMPTY = 0

# Internal byte codes of the colours (see the module docstring).
_B = 1
_W = 255


class _Geometry:
    """Per-size constant tables, shared by every board of that size."""

    __slots__ = ("size", "nn", "nb", "diag", "eye_limit", "nbr_np", "zobrist", "z_white_to_play")

    def __init__(self, size: int) -> None:
        n = size
        self.size = n
        self.nn = n * n
        nb: list[tuple[int, ...]] = []
        diag: list[tuple[int, ...]] = []
        for p in range(n * n):
            r, c = divmod(p, n)
            nb.append(
                tuple(
                    rr * n + cc
                    for rr, cc in ((r - 1, c), (r, c - 1), (r, c + 1), (r + 1, c))
                    if 0 <= rr < n and 0 <= cc < n
                )
            )
            diag.append(
                tuple(
                    rr * n + cc
                    for rr, cc in ((r - 1, c - 1), (r - 1, c + 1), (r + 1, c - 1), (r + 1, c + 1))
                    if 0 <= rr < n and 0 <= cc < n
                )
            )
        self.nb = tuple(nb)
        self.diag = tuple(diag)
        # An edge or corner point is a real eye only with no opponent diagonal; a centre point
        # tolerates one.
        self.eye_limit = tuple(1 if len(x) < 4 else 2 for x in nb)
        pad = np.full((n * n, 4), n * n, dtype=np.intp)
        for p, x in enumerate(nb):
            pad[p, : len(x)] = x
        self.nbr_np = pad
        # Fixed seed: hashes are comparable between processes (useful for caches and tests).
        rng = random.Random(0x5EED0000 + n)
        zb = [rng.getrandbits(64) for _ in range(n * n)]
        zw = [rng.getrandbits(64) for _ in range(n * n)]
        table: list[list[int] | None] = [None] * 256
        table[_B] = zb
        table[_W] = zw
        self.zobrist = table
        self.z_white_to_play = rng.getrandbits(64)


@cache
def _geometry(size: int) -> _Geometry:
    return _Geometry(size)


def _signed(code: int) -> int:
    return 1 if code == _B else -1
