"""Training shard files (docs/formats.md section 4): writer and reader.

A shard is an uncompressed ``.npz`` that plain ``numpy.load`` opens, one row per
full-search move of an accepted game, all rows of one board size:

=============== ======== ======================= ==========================================
key             dtype    shape                   meaning
=============== ======== ======================= ==========================================
states          uint8    [R, ceil(15*N*N/8)]     packed input planes
globals         float32  [R, 8]                  global features
policy          float32  [R, N*N+1]              search policy target
value           float32  [R]                     outcome, mover's view (+1/-1/0)
score           float32  [R]                     final score, mover's view, komi included
ownership       int8     [R, N*N]                final ownership, mover's view
move_number     int32    [R]                     0-based move index in its game
game_index      int32    [R]                     index of the row's game in game_ids
root_value      float32  [R]                     search root value (diagnostics)
game_ids        <U36     [G]                     game ids
board_size      int32    []                      N
komi            float32  []                      komi
rules           str      []                      rules preset name
format_version  int32    []                      1
=============== ======== ======================= ==========================================

Files are written atomically (temporary file in the same folder, fsync, rename,
fsync of the folder), so a reader never sees a half-written shard.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from kgrpc.durable import atomic_write_bytes

FORMAT_VERSION = 1
NUM_PLANES = 15
NUM_GLOBALS = 8

# Per-row arrays: key -> (dtype, trailing shape as a function of N).
ROW_KEYS: dict[str, tuple[np.dtype, object]] = {
    "states": (np.dtype(np.uint8), lambda n: ((NUM_PLANES * n * n + 7) // 8,)),
    "globals": (np.dtype(np.float32), lambda n: (NUM_GLOBALS,)),
    "policy": (np.dtype(np.float32), lambda n: (n * n + 1,)),
    "value": (np.dtype(np.float32), lambda n: ()),
    "score": (np.dtype(np.float32), lambda n: ()),
    "ownership": (np.dtype(np.int8), lambda n: (n * n,)),
    "move_number": (np.dtype(np.int32), lambda n: ()),
    "game_index": (np.dtype(np.int32), lambda n: ()),
    "root_value": (np.dtype(np.float32), lambda n: ()),
}
META_KEYS = ("game_ids", "board_size", "komi", "rules", "format_version")


class ShardFormatError(ValueError):
    """A row set or a file that does not follow docs/formats.md section 4."""


def check_rows(rows: Mapping[str, np.ndarray], board_size: int) -> int:
    """Check keys, shapes and castability of per-row arrays; return the row count."""
    missing = [k for k in ROW_KEYS if k not in rows]
    if missing:
        raise ShardFormatError(f"missing row arrays: {', '.join(missing)}")
    extra = [k for k in rows if k not in ROW_KEYS]
    if extra:
        raise ShardFormatError(f"unknown row arrays: {', '.join(extra)}")
    count = len(rows["value"])
    for key, (_, trailing) in ROW_KEYS.items():
        want = (count, *trailing(board_size))  # type: ignore[operator]
        got = tuple(np.shape(rows[key]))
        if got != want:
            raise ShardFormatError(f"{key}: shape {got}, expected {want} for board size {board_size}")
    return count


def concat_rows(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate per-row arrays of several games, renumbering nothing."""
    if not parts:
        raise ShardFormatError("no rows to concatenate")
    return {k: np.concatenate([np.asarray(p[k], dtype=dt) for p in parts]) for k, (dt, _) in ROW_KEYS.items()}




def shard_bytes(
    rows: Mapping[str, np.ndarray],
    *,
    board_size: int,
    komi: float,
    rules: str,
    game_ids: Sequence[str],
) -> bytes:
    """The ``.npz`` bytes of a shard (checked, cast to the documented dtypes)."""
    count = check_rows(rows, board_size)
    gi = np.asarray(rows["game_index"])
    if count and (gi.min() < 0 or gi.max() >= len(game_ids)):
        raise ShardFormatError(f"game_index out of range 0..{len(game_ids) - 1}")
    arrays = {k: np.ascontiguousarray(np.asarray(rows[k]).astype(dt, copy=False)) for k, (dt, _) in ROW_KEYS.items()}
    ids = np.asarray(list(game_ids), dtype="<U36")
    if any(len(g) > 36 for g in game_ids):
        raise ShardFormatError("game ids are at most 36 characters")
    buf = io.BytesIO()
    np.savez(
        buf,
        **arrays,
        game_ids=ids,
        board_size=np.int32(board_size),
        komi=np.float32(komi),
        rules=np.array(str(rules)),
        format_version=np.int32(FORMAT_VERSION),
    )
    return buf.getvalue()


def write_shard(
    path: str | os.PathLike[str],
    rows: Mapping[str, np.ndarray],
    *,
    board_size: int,
    komi: float,
    rules: str,
    game_ids: Sequence[str],
) -> int:
    """Write a shard atomically; return its size in bytes."""
    data = shard_bytes(rows, board_size=board_size, komi=komi, rules=rules, game_ids=game_ids)
    atomic_write_bytes(Path(path), data)
    return len(data)


def load_shard(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Load a whole shard into memory (the file is closed on return)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise ShardFormatError(f"{path}: not a readable shard: {exc}") from exc
    missing = [k for k in (*ROW_KEYS, *META_KEYS) if k not in data]
    if missing:
        raise ShardFormatError(f"{path}: missing keys {', '.join(missing)}")
    version = int(data["format_version"])
    if version != FORMAT_VERSION:
        raise ShardFormatError(f"{path}: format_version {version}, this code reads {FORMAT_VERSION}")
    check_rows({k: data[k] for k in ROW_KEYS}, int(data["board_size"]))
    return data
