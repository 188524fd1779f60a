"""The net's view of a position (docs/formats.md section 2): the encoding of feature version
``kgrpc.schema.FEATURE_VERSION``, whose counts and packed layout are defined in kgrpc/schema.py.

``encode(board)`` returns the spatial planes ``bool [NUM_PLANES, N, N]`` and the global
features ``float32 [NUM_GLOBALS]``, both from the point of view of the player to move ("own"),
in the order and with the meanings of the registry ``kgrpc.schema.INPUT_FEATURES`` (each
plane's index below is looked up there by name).

Packed form (wire and shards): ``np.packbits(planes.reshape(count, -1), axis=1)``, big bit
order, ``uint8 [count, packed_row_bytes(N)]`` with ``packed_row_bytes(N) =
ceil(NUM_PLANES*N*N/8)``. Change the encoding only together with ``FEATURE_VERSION``.
"""

from __future__ import annotations

import numpy as np

from kgrpc.go.board import Board, NativeBoard
from kgrpc.native import ext as _ext
from kgrpc.schema import (
    FEATURE_VERSION,
    HISTORY_PLANES,
    INPUT_FEATURES,
    NUM_GLOBALS,
    NUM_PLANES,
    packed_row_bytes,
)

__all__ = [
    "FEATURE_VERSION",
    "HISTORY_PLANES",
    "NUM_GLOBALS",
    "NUM_PLANES",
    "encode",
    "encode_flat",
    "global_features",
    "pack_planes",
    "packed_row_bytes",
    "unpack_planes",
]

_ON_BOARD = INPUT_FEATURES.plane("on_board")
_OWN = INPUT_FEATURES.plane("own_stones")
_OPP = INPUT_FEATURES.plane("opponent_stones")
_OWN_LIBS = INPUT_FEATURES.plane("own_liberties")
_OPP_LIBS = INPUT_FEATURES.plane("opponent_liberties")
_KO = INPUT_FEATURES.plane("ko_banned")
_HISTORY = INPUT_FEATURES.plane("history")

# The stone planes as a function of key = (relative colour + 1) * 4 + min(liberties, 3), where
# the relative colour is +1 own, -1 opponent, 0 empty (empty points have 0 liberties): one
# gather builds nine planes at once (keys 8..11 own, 0..3 opponent; liberties 1, 2, 3+).
_TABLE = np.zeros((NUM_PLANES, 12), dtype=bool)
_TABLE[_ON_BOARD, :] = True
_TABLE[_OWN, 8:12] = True
_TABLE[_OPP, 0:4] = True
for _libs in range(3):
    _TABLE[_OWN_LIBS + _libs, 9 + _libs] = True
    _TABLE[_OPP_LIBS + _libs, 1 + _libs] = True


def _liberty_keys(board: Board) -> np.ndarray:
    nn = board.num_points
    stones = np.frombuffer(board._stones, dtype=np.int8)
    rel = stones * np.int8(board.to_play)
    libs_of_group = np.zeros(nn + 1, dtype=np.int8)
    glibs = board._glibs
    if glibs:
        n = len(glibs)
        roots = np.fromiter(glibs.keys(), dtype=np.intp, count=n)
        counts = np.fromiter(map(len, glibs.values()), dtype=np.int16, count=n)
        libs_of_group[roots] = np.minimum(counts, 3)
    libs = libs_of_group[np.frombuffer(board._gid, dtype=np.uint16)]
    return (rel + 1) * 4 + libs


def encode_flat(board: Board) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`encode` but the planes come flat: ``bool [NUM_PLANES, N*N]``."""
    if type(board) is NativeBoard:
        return _ext.encode_flat(board)  # type: ignore[union-attr]
    planes = _TABLE[:, _liberty_keys(board)]
    for p in board.ko_banned():
        planes[_KO, p] = True
    moves = board.moves
    nn = board.num_points
    for i in range(min(HISTORY_PLANES, len(moves))):
        m = moves[-1 - i]
        if m != nn:
            planes[_HISTORY + i, m] = True
    return planes, global_features(board)


def encode(board: Board) -> tuple[np.ndarray, np.ndarray]:
    """(planes bool [NUM_PLANES, N, N], globals float32 [NUM_GLOBALS]), mover's view."""
    planes, glob = encode_flat(board)
    n = board.size
    return planes.reshape(NUM_PLANES, n, n), glob


def global_features(board: Board) -> np.ndarray:
    if type(board) is NativeBoard:
        return _ext.global_features(board)  # type: ignore[union-attr]
    g = np.zeros(NUM_GLOBALS, dtype=np.float32)
    rules = board.rules
    # Komi is white's bonus: a gain for white to move, a debt for black to move.
    g[0] = (board.komi if board.to_play == -1 else -board.komi) / 20.0
    g[1] = rules.scoring == "territory"
    g[2] = rules.ko == "positional"
    g[3] = rules.ko == "situational"
    g[4] = rules.suicide
    moves = board.moves
    nn = board.num_points
    g[5] = len(moves) >= 1 and moves[-1] == nn
    g[6] = len(moves) >= 2 and moves[-2] == nn
    g[7] = board.size / 19.0
    return g


def pack_planes(planes: np.ndarray) -> np.ndarray:
    """bool [B, NUM_PLANES, N, N] (or [B, NUM_PLANES, N*N]) -> uint8 [B, packed_row_bytes(N)]."""
    planes = np.asarray(planes)
    if planes.ndim < 2 or planes.shape[1] != NUM_PLANES:
        raise ValueError(f"expected planes of shape [B, {NUM_PLANES}, N, N], got {planes.shape}")
    return np.packbits(planes.reshape(planes.shape[0], -1).astype(bool, copy=False), axis=1)


def unpack_planes(packed: np.ndarray | bytes, count: int, size: int) -> np.ndarray:
    """uint8 [count, K] or the concatenated bytes -> bool [count, NUM_PLANES, N, N]."""
    if not 2 <= size <= 19:
        raise ValueError(f"board size {size} out of range 2..19")
    k = packed_row_bytes(size)
    if isinstance(packed, (bytes, bytearray, memoryview)):
        if len(packed) != count * k:
            raise ValueError(
                f"packed planes: expected {count} x {k} = {count * k} bytes for {count} "
                f"positions of {size}x{size}, got {len(packed)}"
            )
        arr = np.frombuffer(packed, dtype=np.uint8).reshape(count, k)
    else:
        arr = np.asarray(packed)
        if arr.dtype != np.uint8 or arr.shape != (count, k):
            raise ValueError(
                f"packed planes: expected uint8 [{count}, {k}], got {arr.dtype} {list(arr.shape)}"
            )
    bits = np.unpackbits(arr, axis=1, count=NUM_PLANES * size * size)
    return bits.view(bool).reshape(count, NUM_PLANES, size, size)
