"""The trainer's store mode: the window from the coordinator's index, the shard objects straight
from its blob store, into a bounded local cache (``index`` / ``store`` settings).

For a run whose coordinator keeps its index in PostgreSQL and its blobs in an S3 store (or a
shared directory), a trainer on another machine needs no byte of training data through the
coordinator: it reads the ``shards`` table of the index (read-only) and downloads each shard it
trains on from the store, by the key the coordinator put it under
(:func:`kgrpc.coordinator.blobs.shard_key`: ``training_data/<run>/games_NNNNN.npz``).

* Listing: every row of ``shards`` (the runs of ``runs``, or every run), ordered as
  :class:`trainer.data.ShardIndex` orders files (oldest first, by ``created_ms``, run, number),
  with the rows, games, board size, size and sha256 the index recorded at the cut, less the
  shards ``ListShards`` withholds (games of a quarantined token). Only rank 0 lists; the
  others get the list with the rest of rank 0's decision (trainer.train).
* Fetching (:meth:`StoreShards.fetch`, called by :class:`trainer.data.WindowLoader` for the
  shards a rank loads): a cached file with the indexed size is used as is; otherwise the
  object is downloaded to ``<file_name>.part`` (atomically, by the store), its size and sha256
  are checked against the index's, and it is renamed into place. An object that does not match
  is refused (:class:`StoreShardError`, a :class:`trainer.data.ShardError`: the loader leaves
  the shard out and says so, or stops under ``strict``), the partial file removed.
* The cache (``WORK/shard_cache/rank<R>/training_data/<run>/``, one directory per DDP process
  so no process evicts a file another is about to read) holds at most ``cache_bytes``: before
  a download, least-recently-used files (by modification time, touched on every use) are
  removed until the new shard fits beside the downloads in flight (FETCH_THREADS at once),
  but never a file the load in progress still has to read: a window bigger than the cache is
  loaded whole, over the bound for that moment. Shards already loaded stay in memory for as
  long as they are in the window, so a cache smaller than the window costs downloads after a
  restart only.
* DDP: a rank loads only the window's shards whose number modulo the world size is its rank
  (a stable split: a shard stays with its rank while the window slides, so each new
  generation downloads only new shards); see :func:`rank_part`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgrpc.blobstore import (
    BlobNotFoundError,
    BlobStore,
    BlobStoreError,
    S3Options,
    is_remote,
    open_store,
)
from kgrpc.coordinator.db import DB_NAME
from kgrpc.digest import file_digest
from kgrpc.durable import fsync_dir
from trainer.data import ShardError, ShardFile

if TYPE_CHECKING:
    from trainer.config import TrainConfig
    from trainer.data import WindowLoader

log = logging.getLogger("kgrpc.train.store")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
SKIP_RUNS = frozenset({"current"})
FETCH_THREADS = 4  # downloads at once, per process
SHARD_COLUMNS = (
    "run",
    "idx",
    "file_name",
    "size_bytes",
    "sha256",
    "games",
    "positions",
    "board_size",
    "created_ms",
)


class StoreShardError(ShardError):
    """A shard object that is missing from the store or does not match the index."""


def _safe(part: str, what: str) -> str:
    # Names come from the index: never let one escape the cache directory.
    if not _SAFE_NAME.match(part) or part in (".", ".."):
        raise StoreShardError(f"refusing {what} {part!r} from the index")
    return part


def connect_index(index: str) -> Any:
    """A read-only connection to the coordinator's index: a ``postgresql://`` URL, or the
    SQLite file (``coordinator.sqlite3``, or the data directory that holds it)."""
    from kgrpc.coordinator import pg

    if pg.is_url(index):
        return pg.PgConnection(index, readonly=True)
    path = Path(index).expanduser()
    if path.is_dir():
        path = path / DB_NAME
    if not path.is_file():
        raise ValueError(
            f"index {index!r}: no such SQLite file (give the coordinator's {DB_NAME}, its "
            "data directory, or a postgresql:// URL)"
        )
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def default_store_root(index: str) -> Path | None:
    """The store of a SQLite index when none is given: the coordinator's data directory (its
    default store, where the shards lie next to the index)."""
    from kgrpc.coordinator import pg

    if not index or pg.is_url(index):
        return None
    path = Path(index).expanduser()
    return path if path.is_dir() else path.parent


def open_shard_store(store: str, index: str, options: S3Options | None = None) -> BlobStore:
    """The blob store of the ``store`` setting (a directory or s3://BUCKET/PREFIX; empty: the
    SQLite index's directory), reached once when remote: BlobStoreError saying what is wrong."""
    root = default_store_root(index)
    if not store and root is None:
        raise BlobStoreError(
            "a PostgreSQL index needs the store setting too (the coordinator's store URL)"
        )
    opened = open_store(store, default_root=root, options=options)
    if is_remote(store):
        opened.check()  # a local store is only read: its check wants it writable
    return opened


def list_shards(conn: Any, runs: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The ``shards`` rows of ``runs`` (every run but the rolling window's when empty),
    oldest first, without those ListShards leaves out: the shards holding games of a
    quarantined token (:func:`kgrpc.coordinator.quorum.excluded_shards`)."""
    from kgrpc.coordinator.quorum import excluded_shards

    rows = conn.execute(
        f"SELECT {', '.join(SHARD_COLUMNS)} FROM shards ORDER BY created_ms, run, idx"
    ).fetchall()
    wanted = set(runs)
    listed = [dict(zip(SHARD_COLUMNS, tuple(r), strict=True)) for r in rows]
    listed = [r for r in listed if (r["run"] in wanted if wanted else r["run"] not in SKIP_RUNS)]
    held = {run: excluded_shards(conn, run) for run in {r["run"] for r in listed}}
    return [r for r in listed if r["idx"] not in held[r["run"]]]


def rank_part(shards: list[ShardFile], rank: int, world: int) -> tuple[int, int]:
    """(rank, world) of the disjoint split when every rank gets at least one of ``shards``,
    else (0, 1): each rank loads them all and takes every world-th batch (trainer.batches)."""
    if world <= 1 or {s.index % world for s in shards} != set(range(world)):
        return 0, 1
    return rank, world


class StoreShards:
    """The :class:`trainer.data.ShardIndex` of store mode: ``refresh()``, ``shards``,
    ``total_rows``, plus :meth:`fetch` for the loader."""

    def __init__(
        self,
        index: str,
        store: BlobStore,
        cache_dir: str | os.PathLike[str],
        cache_bytes: int,
        runs: Iterable[str] = (),
    ) -> None:
        self.index = index
        self.store = store
        self.cache_root = Path(cache_dir)
        self.cache_bytes = cache_bytes
        self.runs = list(runs)
        self.shards: list[ShardFile] = []
        self.downloads = 0
        self.downloaded_bytes = 0
        self.evicted = 0
        self._conn: Any = None
        # fetch_many's threads share the cache's accounting: bytes being downloaded, and the
        # files the load in progress still needs (never evicted for another of its shards).
        self._lock = threading.Lock()
        self._reserved = 0
        self._pinned: set[Path] = set()

    # ---------------------------------------------------------------- listing
    def refresh(self) -> list[ShardFile]:
        """The listing; the last one while the index cannot be read (a PostgreSQL restart:
        the trainer goes on with what it has, as it does when pulling fails)."""
        try:
            if self._conn is None:
                self._conn = connect_index(self.index)
            rows = list_shards(self._conn, self.runs)
        except sqlite3.Error as exc:  # pg.IndexUnavailable is an OperationalError
            log.error("reading the shard listing from the index failed: %s", exc)
            return self.shards
        self.shards = [
            ShardFile(
                path=self.local_path(r["run"], r["file_name"]),
                run=r["run"],
                index=int(r["idx"]),
                mtime_ns=int(r["created_ms"]) * 1_000_000,
                size_bytes=int(r["size_bytes"]),
                rows=int(r["positions"]),
                games=int(r["games"]),
                board_size=int(r["board_size"]),
                sha256=str(r["sha256"]),
            )
            for r in rows
        ]
        return self.shards

    def local_path(self, run: str, file_name: str) -> Path:
        return (
            self.cache_root
            / "training_data"
            / _safe(run, "run name")
            / _safe(file_name, "shard file name")
        )

    def localize(self, shards: list[ShardFile]) -> list[ShardFile]:
        """``shards`` (rank 0's listing, naming rank 0's cache) with this process's cache
        paths: each DDP process keeps its own cache directory."""
        return [
            s
            if s.path.parent.parent.parent == self.cache_root
            else dataclasses.replace(s, path=self.local_path(s.run, s.path.name))
            for s in shards
        ]

    @property
    def total_rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ---------------------------------------------------------------- the cache
    def cached(self) -> list[tuple[float, int, Path]]:
        """(last use, size, path) of every cached shard file."""
        out = []
        for p in (self.cache_root / "training_data").glob("*/games_*.npz"):
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            out.append((st.st_mtime, st.st_size, p))
        return out

    def cache_used(self) -> int:
        return sum(size for _, size, _ in self.cached())

    def _make_room(self, incoming: int, keep: Path) -> None:
        """Evict least recently used files until ``incoming`` more bytes fit beside the cache
        and the downloads in flight; never ``keep`` or a pinned file (one the load in
        progress still has to read). Called under the lock; reserves ``incoming``."""
        files = sorted(self.cached())
        used = sum(size for _, size, _ in files) + self._reserved
        for _, size, path in files:
            if used + incoming <= self.cache_bytes:
                break
            if path == keep or path in self._pinned:
                continue
            path.unlink(missing_ok=True)
            used -= size
            self.evicted += 1
            log.info("shard cache: evicted %s (%d bytes)", path.name, size)
        if used + incoming > self.cache_bytes:
            log.warning(
                "shard cache: %s (%d bytes) does not fit in store_cache_mb beside the shards "
                "this load needs; kept anyway",
                keep.name,
                incoming,
            )
        self._reserved += incoming

    # ---------------------------------------------------------------- fetching
    def fetch(self, shard: ShardFile) -> Path:
        """The local file of ``shard`` (downloaded and checked when not cached)."""
        dest = shard.path
        try:
            if dest.stat().st_size == shard.size_bytes:
                os.utime(dest)  # most recently used
                return dest
        except FileNotFoundError:
            pass
        from kgrpc.coordinator.blobs import shard_key

        key = shard_key(shard.run, dest.name)
        with self._lock:
            self._make_room(shard.size_bytes, dest)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(dest.name + ".part")
            try:
                self.store.download(key, part)  # atomic: the whole object or no file
            except BlobNotFoundError as exc:
                raise StoreShardError(
                    f"{key}: listed in the index, missing from the store"
                ) from exc
            got = file_digest(part)
            if got.size != shard.size_bytes or (shard.sha256 and got.sha256 != shard.sha256):
                part.unlink(missing_ok=True)
                raise StoreShardError(
                    f"{key}: the store's object is {got.size} bytes with sha256 "
                    f"{got.sha256[:16]}, the index lists {shard.size_bytes} bytes with sha256 "
                    f"{shard.sha256[:16]}: refusing it (a corrupt or replaced object)"
                )
            os.replace(part, dest)
            fsync_dir(dest.parent)
        finally:
            with self._lock:
                self._reserved -= shard.size_bytes
        with self._lock:
            self.downloads += 1
            self.downloaded_bytes += got.size
        log.info("fetched %s from the store (%d bytes)", key, got.size)
        return dest

    def fetch_many(self, shards: list[ShardFile]) -> dict[Path, BaseException | None]:
        """:meth:`fetch` each of ``shards``, FETCH_THREADS at a time (an S3 GET is mostly
        waiting), none of them evicted to make room for another; each one's exception, or
        None."""
        if not shards:
            return {}
        with self._lock:
            self._pinned = {s.path for s in shards}
        try:
            with ThreadPoolExecutor(min(FETCH_THREADS, len(shards))) as pool:
                futures = {s.path: pool.submit(self.fetch, s) for s in shards}
                return {path: f.exception() for path, f in futures.items()}
        finally:
            with self._lock:
                self._pinned = set()


def fetch_part(loader: WindowLoader, chosen: list[ShardFile]) -> tuple[tuple[int, int], set[Path]]:
    """For :meth:`trainer.data.WindowLoader.load` in store mode: fetch this process's share of
    the window's shards ``chosen`` (those not already in memory, several at once); that
    share's (rank, world) and the shards to leave out this time. A shard the store gives but
    not intact is left out for good and named once (as an unreadable file is), or stops the
    trainer under ``strict``; one the store could not be reached for is tried again at the
    next load."""
    assert loader.fetch is not None
    part = rank_part(chosen, loader.rank, loader.world)
    in_memory = {path for path, _ in loader._cache}
    want = [s for s in chosen if s.index % part[1] == part[0] and s.path not in in_memory]
    source = getattr(loader.fetch, "__self__", None)
    if isinstance(source, StoreShards):
        errors = source.fetch_many(want)
    else:  # any other fetch function: one at a time
        errors = {}
        for s in want:
            try:
                loader.fetch(s)
                errors[s.path] = None
            except Exception as exc:  # noqa: BLE001 - sorted out below
                errors[s.path] = exc
    skip: set[Path] = set()
    for path, exc in errors.items():
        if exc is None:
            continue
        if isinstance(exc, ShardError):
            if loader.strict:
                raise exc
            log.error("leaving out shard: %s", exc)
            loader.bad.add(path)
        elif isinstance(exc, BlobStoreError):  # unreachable: without it this generation only
            log.error("store unreachable, training without %s this time: %s", path.name, exc)
        else:
            raise exc
        skip.add(path)
    return part, skip


def use_store(cfg: TrainConfig, rank: int, world: int, windows: WindowLoader) -> StoreShards:
    """The shard listing of store mode for ``cfg`` (``index`` set), wired into ``windows``:
    BlobStoreError or ValueError with one line when the index or the store cannot be opened."""
    try:
        store = open_shard_store(cfg.store, cfg.index, cfg.store_options())
        connect_index(cfg.index).close()  # a wrong URL or file: one line now, not at refresh
    except (BlobStoreError, sqlite3.Error) as exc:
        raise ValueError(str(exc)) from exc
    cache = cfg.work_path / "shard_cache" / f"rank{rank}"
    source = StoreShards(
        cfg.index, store, cache, int(cfg.store_cache_mb * (1 << 20)), cfg.run_names
    )
    windows.fetch = source.fetch
    windows.rank, windows.world = rank, world
    return source
