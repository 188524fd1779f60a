"""Training shard files (docs/formats.md section 4): writer and reader.

A shard is an uncompressed ``.npz`` that plain ``numpy.load`` opens, one row per full-search
move of an accepted game, all rows of one board size. Its keys, dtypes and shapes are defined
in kgrpc/schema.py (``SHARD_ROW_ARRAYS``, ``SHARD_META_KEYS``, ``feature_version``); this
module writes them and is the one way to read them: :func:`load_shard` (arrays) and
:func:`read_header` (counts only) check the format version, the feature version (a shard
without one, written before it was recorded, is version 1), every key, dtype and shape.

Files are written atomically (temporary file in the same folder, fsync, rename,
fsync of the folder), so a reader never sees a half-written shard.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.durable import atomic_write_bytes, atomic_writer
from kgrpc.schema import (
    FEATURE_VERSION,
    GAME_ID_DTYPE,
    LEGACY_FEATURE_VERSION,
    SHARD_FEATURE_VERSION_KEY,
    SHARD_FORMAT_VERSION,
    SHARD_META_KEYS,
    SHARD_ROW_ARRAYS,
    FeatureVersionError,
    check_feature_version,
)

# The schema's names, as this module's callers know them.
FORMAT_VERSION = SHARD_FORMAT_VERSION
ROW_KEYS = SHARD_ROW_ARRAYS
META_KEYS = SHARD_META_KEYS


class ShardFormatError(ValueError):
    """A row set or a file that does not follow docs/formats.md section 4."""


class ShardFeatureVersionError(ShardFormatError, FeatureVersionError):
    """A shard whose positions are encoded in another feature version."""


@dataclass(frozen=True)
class ShardHeader:
    """What a shard holds, read without its large arrays."""

    rows: int
    games: int
    board_size: int
    komi: float
    rules: str
    feature_version: int


def _check_arrays(
    arrays: Mapping[str, np.ndarray], board_size: int, count: int, *, exact: bool, where: str = ""
) -> None:
    """Shapes (and with ``exact`` the dtypes) of per-row arrays, as the schema says."""
    for key, value in arrays.items():
        dtype, trailing = ROW_KEYS[key]
        want = (count, *trailing(board_size))
        got_dtype = np.asarray(value).dtype
        got = tuple(np.shape(value))
        if got != want or (exact and got_dtype != dtype):
            raise ShardFormatError(
                f"{where}{key} is {got_dtype}{list(got)}, expected "
                f"{dtype}{list(want)} (board {board_size})"
            )


def check_rows(rows: Mapping[str, np.ndarray], board_size: int) -> int:
    """Check keys, shapes and castability of per-row arrays; return the row count."""
    missing = [k for k in ROW_KEYS if k not in rows]
    if missing:
        raise ShardFormatError(f"missing row arrays: {', '.join(missing)}")
    extra = [k for k in rows if k not in ROW_KEYS]
    if extra:
        raise ShardFormatError(f"unknown row arrays: {', '.join(extra)}")
    count = len(rows["value"])
    _check_arrays(rows, board_size, count, exact=False)
    return count


def shard_bytes(
    rows: Mapping[str, np.ndarray],
    *,
    board_size: int,
    komi: float,
    rules: str,
    game_ids: Sequence[str],
) -> bytes:
    """The ``.npz`` bytes of a shard (checked, cast to the documented dtypes), recording this
    code's feature version."""
    count = check_rows(rows, board_size)
    gi = np.asarray(rows["game_index"])
    if count and (gi.min() < 0 or gi.max() >= len(game_ids)):
        raise ShardFormatError(f"game_index out of range 0..{len(game_ids) - 1}")
    arrays = {
        k: np.ascontiguousarray(np.asarray(rows[k]).astype(dt, copy=False))
        for k, (dt, _) in ROW_KEYS.items()
    }
    if any(len(g) > 36 for g in game_ids):
        raise ShardFormatError("game ids are at most 36 characters")
    buf = io.BytesIO()
    np.savez(buf, **arrays, **_meta_arrays(game_ids, board_size, komi, rules))
    return buf.getvalue()


def _meta_arrays(
    game_ids: Sequence[str], board_size: int, komi: float, rules: str
) -> dict[str, np.ndarray]:
    """A shard's members other than the per-row arrays, recording this code's versions."""
    return {
        "game_ids": np.asarray(list(game_ids), dtype=GAME_ID_DTYPE),
        "board_size": np.asarray(np.int32(board_size)),
        "komi": np.asarray(np.float32(komi)),
        "rules": np.array(str(rules)),
        "format_version": np.asarray(np.int32(FORMAT_VERSION)),
        SHARD_FEATURE_VERSION_KEY: np.asarray(np.int32(FEATURE_VERSION)),
    }


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


def write_shard_games(
    path: str | os.PathLike[str],
    games: Sequence[Mapping[str, np.ndarray]],
    *,
    board_size: int,
    komi: float,
    rules: str,
    game_ids: Sequence[str],
) -> int:
    """Write atomically one shard of several games' rows (``games[i]`` holds game i's per-row
    arrays, ``game_index`` excepted: it is numbered here); return the rows written.

    Streamed array by array, game by game, into the ``.npz`` members: the coordinator cuts its
    shards this way, holding the games' rows once instead of also a merged copy and the whole
    file's bytes. The file is the one :func:`write_shard` writes for the merged rows.
    """
    if not games:
        raise ShardFormatError("no rows to write")
    if len(games) != len(game_ids):
        raise ShardFormatError(f"{len(games)} games but {len(game_ids)} game ids")
    if any(len(g) > 36 for g in game_ids):
        raise ShardFormatError("game ids are at most 36 characters")
    counts = []
    for i, g in enumerate(games):
        part = {k: v for k, v in g.items() if k != "game_index"}
        part["game_index"] = np.zeros(len(g["value"]), np.int32)
        try:
            counts.append(check_rows(part, board_size))
        except ShardFormatError as exc:
            raise ShardFormatError(f"game {i} ({game_ids[i]}): {exc}") from None
    rows = sum(counts)

    def parts(key: str) -> Iterator[np.ndarray]:
        for gi, (g, n) in enumerate(zip(games, counts, strict=True)):
            yield np.full(n, gi, dtype=np.int32) if key == "game_index" else g[key]

    _write_streamed(path, rows, parts, game_ids, board_size=board_size, komi=komi, rules=rules)
    return rows


def _write_streamed(
    path: str | os.PathLike[str],
    rows: int,
    parts: Callable[[str], Iterable[np.ndarray]],
    game_ids: Sequence[str],
    *,
    board_size: int,
    komi: float,
    rules: str,
) -> None:
    """Write atomically a shard of ``rows`` rows whose per-row array ``key`` is the
    concatenation of ``parts(key)`` (cast to the schema's dtype), one part in memory at a time;
    the meta members follow, as :func:`shard_bytes` writes them."""
    with atomic_writer(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        for key, (dt, trailing) in ROW_KEYS.items():
            with z.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(
                    member,
                    {
                        "descr": np.lib.format.dtype_to_descr(np.dtype(dt)),
                        "fortran_order": False,
                        "shape": (rows, *trailing(board_size)),
                    },
                )
                for part in parts(key):
                    flat = np.ascontiguousarray(part, dtype=dt).reshape(-1)
                    member.write(memoryview(flat).cast("B"))
        for key, value in _meta_arrays(game_ids, board_size, komi, rules).items():
            with z.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, value, allow_pickle=False)


def write_window(
    path: str | os.PathLike[str],
    sources: Sequence[str | os.PathLike[str]],
    rows_wanted: int,
    *,
    board_size: int,
    komi: float,
    rules: str,
) -> int:
    """Write atomically to ``path`` one shard of the newest ``rows_wanted`` rows of the shards
    ``sources`` (oldest first, all of ``board_size``), keeping only the games those rows use;
    return the rows written (0: nothing written, as for no rows).

    Streamed one array of one source at a time, so memory stays that of the largest source
    array however large the window: the coordinator rebuilds its rolling window this way.
    """
    if rows_wanted <= 0 or not sources:
        return 0
    # Pass 1: row counts, game ids and game indices (small) of every source.
    heads = [load_shard(p, arrays=["game_index"]) for p in sources]
    for p, h in zip(sources, heads, strict=True):
        if int(h["board_size"]) != board_size:
            raise ShardFormatError(f"{p}: board size {int(h['board_size'])}, not {board_size}")
    counts = [len(h["game_index"]) for h in heads]
    total = sum(counts)
    skip = max(0, total - rows_wanted)
    offsets, ids, lo = [], [], []
    for h, n in zip(heads, counts, strict=True):
        lo.append(min(n, skip))
        skip -= lo[-1]
        offsets.append(len(ids))
        ids.extend(str(g) for g in h["game_ids"])
    kept = [
        h["game_index"][start:].astype(np.int64) + off
        for h, start, off in zip(heads, lo, offsets, strict=True)
    ]
    rows = sum(len(k) for k in kept)
    if rows == 0:
        return 0
    used = np.unique(np.concatenate(kept))
    remap = np.full(len(ids), -1, dtype=np.int32)
    remap[used] = np.arange(len(used), dtype=np.int32)
    game_ids = [ids[i] for i in used]

    # Pass 2: each per-row array, source by source, into its member of the .npz.
    def parts(key: str) -> Iterator[np.ndarray]:
        for p, start, k in zip(sources, lo, kept, strict=True):
            yield remap[k] if key == "game_index" else load_shard(p, arrays=[key])[key][start:]

    _write_streamed(path, rows, parts, game_ids, board_size=board_size, komi=komi, rules=rules)
    return rows


def _read(path: str | os.PathLike[str], keys: Iterable[str] | None) -> dict[str, np.ndarray]:
    """Members ``keys`` (None = all) of the ``.npz`` at ``path``, after checking that every
    key a shard needs is there. OSError (a missing file, a failing disk) goes through."""
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            missing = [k for k in (*ROW_KEYS, *META_KEYS) if k not in files]
            if not missing:
                wanted = z.files if keys is None else [k for k in keys if k in files]
                data = {k: z[k] for k in wanted}
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise ShardFormatError(f"{path}: unreadable shard: {exc}") from exc
    if missing:
        raise ShardFormatError(f"{path}: missing keys {', '.join(missing)}")
    return data


def _scalar(
    path: str | os.PathLike[str],
    data: Mapping[str, np.ndarray],
    key: str,
    kind: type[int] | type[float] | type[str],
) -> Any:
    a = data[key]
    if a.ndim != 0:
        raise ShardFormatError(f"{path}: {key} is {a.dtype}{list(a.shape)}, expected one value")
    try:
        return kind(a)
    except (TypeError, ValueError):
        raise ShardFormatError(f"{path}: {key} is {a!r}, expected {kind.__name__}") from None


def _check_versions(path: str | os.PathLike[str], data: dict[str, np.ndarray]) -> int:
    """Refuse another format or feature version; return the feature version (an old shard
    without one is version 1, and gets it added to ``data``)."""
    version = _scalar(path, data, "format_version", int)
    if version != FORMAT_VERSION:
        raise ShardFormatError(
            f"{path}: format_version {version}, this code reads {FORMAT_VERSION}"
        )
    if SHARD_FEATURE_VERSION_KEY not in data:
        data[SHARD_FEATURE_VERSION_KEY] = np.int32(LEGACY_FEATURE_VERSION)
    feature_version = _scalar(path, data, SHARD_FEATURE_VERSION_KEY, int)
    try:
        check_feature_version(feature_version, f"shard {path}")
    except FeatureVersionError as exc:
        raise ShardFeatureVersionError(exc.what, exc.version) from None
    return feature_version


_HEADER_KEYS = ("value", *META_KEYS, SHARD_FEATURE_VERSION_KEY)


def _row_count(path: str | os.PathLike[str], data: Mapping[str, np.ndarray]) -> int:
    value = data["value"]
    if value.ndim != 1:
        raise ShardFormatError(
            f"{path}: value is {value.dtype}{list(value.shape)}, expected one entry per row"
        )
    return int(value.shape[0])


def read_header(path: str | os.PathLike[str]) -> ShardHeader:
    """Counts and settings of a shard, versions checked, without reading its large arrays."""
    data = _read(path, _HEADER_KEYS)
    feature_version = _check_versions(path, data)
    return ShardHeader(
        rows=_row_count(path, data),
        games=int(data["game_ids"].shape[0]),
        board_size=_scalar(path, data, "board_size", int),
        komi=_scalar(path, data, "komi", float),
        rules=_scalar(path, data, "rules", str),
        feature_version=feature_version,
    )


def load_shard(
    path: str | os.PathLike[str], arrays: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """Load a shard into memory (the file is closed on return), checked: format and feature
    version (``feature_version`` is 1 in the result for a shard that records none), keys,
    and every per-row array's dtype and shape. ``arrays``: the per-row arrays wanted (default
    all); the whole-shard values always come too."""
    row_keys = list(ROW_KEYS) if arrays is None else list(arrays)
    unknown = [k for k in row_keys if k not in ROW_KEYS]
    if unknown:
        raise ValueError(f"not per-row shard arrays: {', '.join(unknown)}")
    data = _read(path, None if arrays is None else (*row_keys, *_HEADER_KEYS))
    _check_versions(path, data)
    checked = {k: data[k] for k in ("value", *row_keys)}
    _check_arrays(
        checked,
        _scalar(path, data, "board_size", int),
        _row_count(path, data),
        exact=True,
        where=f"{path}: ",
    )
    if arrays is not None and "value" not in row_keys:
        del data["value"]
    return data
