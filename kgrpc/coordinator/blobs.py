"""The coordinator's side of the blob store (kgrpc.blobstore): which key each stored file has,
how a shard and a model reach the store before their index row, and what ingest does while
the store is down.

Keys (the data directory's layout, which is the local store's)::

    training_data/<run>/games_00001.npz     shards (kgrpc.shards)
    training_data/current/latest_games.npz  the rolling window
    models/NAME.onnx, NAME.fp16.onnx ...    model files (kgrpc.coordinator.models)
    sgf/<model>/<kind>/<game id>.sgf        kept games (kgrpc.coordinator.archive)

With the default store (DATA_DIR itself) every file is written in place as it always was and
a "put" only checks it is there. With another store (``store = "s3://..."``), files are
written under DATA_DIR first (the shard cut's file work, the published model's temporary
file), then put, create-only, and only then indexed: an index row always names a whole
object. A put that fails leaves the row unwritten: the shard's games stay in the ingest
journal and the cut is tried again (:class:`StoreOutage` spaces the tries and bounds the
journal), the publish is answered UNAVAILABLE.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from kgrpc.blobstore import (
    BlobExistsError,
    BlobStore,
    BlobStoreError,
    BlobUnavailableError,
    S3Options,
    open_store,
)
from kgrpc.coordinator.errors import CoordinatorError

log = logging.getLogger("kgrpc.coordinator")

TRAINING_DIR = "training_data"
MODELS_DIR = "models"
SGF_DIR = "sgf"
# Spacing of the tries to reach a store that is down (seconds, doubling up to the last).
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 10.0


def shard_key(run: str, file_name: str) -> str:
    return f"{TRAINING_DIR}/{run}/{file_name}"


def model_key(file_name: str) -> str:
    return f"{MODELS_DIR}/{file_name}"


def sgf_key(relative: str) -> str:
    return f"{SGF_DIR}/{relative}"


@dataclass(frozen=True)
class BlobRef:
    """An object to send from (downloads.read_chunks reads it in ranges)."""

    store: BlobStore
    key: str


def open_for(
    data_dir: str | os.PathLike[str], url: str, options: S3Options | None = None
) -> BlobStore:
    """The store of the ``store`` setting (empty: DATA_DIR itself)."""
    return open_store(url, default_root=data_dir, options=options)


def in_place(store: BlobStore, key: str, path: Path) -> bool:
    """Whether ``path`` is the object's own file (the default store): nothing to put."""
    own = store.local_path(key)
    return own is not None and Path(own).absolute() == Path(path).absolute()


def put_shard(store: BlobStore, key: str, path: Path) -> None:
    """Put a shard file before its index row is written. Create-only: an object already under
    the key with other bytes can only be one left by a cut stopped before its row (a shard
    number is planned only while no row has it), and is replaced, with a warning."""
    if in_place(store, key, path):
        return
    try:
        store.put_file(key, path, create_only=True)
    except BlobExistsError:
        log.warning("replacing %s: left in the store by a cut that was not indexed", key)
        store.put_file(key, path)


def put_window(store: BlobStore, path: str | os.PathLike[str]) -> None:
    """Put a rebuilt ``latest_games.npz`` (replacing the last one; a no-op in place). A
    rebuild that left no file (every shard withheld by a token quarantine:
    kgrpc.coordinator.cut.write_window) removes the store's copy too."""
    key = f"{TRAINING_DIR}/current/{Path(path).name}"
    if in_place(store, key, Path(path)):
        return
    if not Path(path).exists():
        store.delete(key)
        return
    store.put_file(key, path)


def fetch_sources(store: BlobStore, sources: list[str]) -> None:
    """Download the shards of a window rebuild that have no local copy (cut by another
    replica, or pruned here: :func:`prune_local`), each atomically to its own path."""
    for src in sources:
        path = Path(src)
        key = shard_key(path.parent.name, path.name)
        if not path.exists() and not in_place(store, key, path):
            store.download(key, path)


def prune_local(store: BlobStore, run_dir: Path, names: list[str]) -> int:
    """Remove the local copies of the indexed shards ``names`` of ``run_dir``: with a remote
    store the bucket holds them, and DATA_DIR keeps only what the next window rebuild reads
    (:meth:`kgrpc.coordinator.store.Store.prune_local` chooses). Nothing on the default
    store, where the local file is the object."""
    removed = 0
    for name in names:
        path = run_dir / name
        if in_place(store, shard_key(run_dir.name, name), path):
            continue
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            continue
    return removed


def unavailable(exc: BlobStoreError) -> CoordinatorError:
    """The answer to a call that needed the store and could not reach it."""
    import grpc  # not at import: kgrpc.coordinator.store is loaded by the replay processes

    code = (
        grpc.StatusCode.UNAVAILABLE
        if isinstance(exc, BlobUnavailableError)
        else grpc.StatusCode.INTERNAL
    )
    return CoordinatorError(code, f"the coordinator's object store: {exc}")


class StoreOutage:
    """The store's health as ingest sees it: shard puts that fail start an outage, during
    which cuts are tried at growing intervals (a cut writes a whole shard first), and uploads
    are acknowledged into the ingest journal until it holds ``journal_bound`` bytes; then
    they are answered UNAVAILABLE until the store takes a shard again."""

    def __init__(self, store: BlobStore, journal_path: Path, journal_bound: int) -> None:
        self.store = store
        self.journal_path = journal_path
        self.journal_bound = journal_bound
        self.since = 0.0  # wall time the outage began; 0 while the store works
        self.error = ""
        self._next_try = 0.0
        self._wait = RETRY_FIRST_S

    @property
    def down(self) -> bool:
        return self.since != 0.0

    def failed(self, exc: BlobStoreError) -> None:
        now = time.monotonic()
        if not self.down:
            self.since = time.time()
            self._wait = RETRY_FIRST_S
            log.error(
                "object store unreachable (%s): games wait in the ingest journal (up to %.1f "
                "MiB) until it is back",
                exc,
                self.journal_bound / (1 << 20),
            )
        else:
            self._wait = min(RETRY_MAX_S, self._wait * 2)
        self.error = str(exc)
        self._next_try = now + self._wait

    def worked(self) -> None:
        if self.down:
            log.warning(
                "object store works again after %.0f s: the journal drains into it",
                time.time() - self.since,
            )
        self.since = 0.0
        self.error = ""

    def retry_in(self) -> float:
        """Seconds until the next try is due."""
        return max(0.0, self._next_try - time.monotonic())

    def may_try(self) -> bool:
        """Whether a cut may be tried now (always while the store works)."""
        return not self.down or time.monotonic() >= self._next_try

    def journal_bytes(self) -> int:
        try:
            return self.journal_path.stat().st_size
        except OSError:
            return 0

    def admit(self) -> None:
        """Raise UNAVAILABLE when the store is down and the journal holds its bound."""
        if not self.down:
            return
        held = self.journal_bytes()
        if held < self.journal_bound:
            return
        import grpc

        raise CoordinatorError(
            grpc.StatusCode.UNAVAILABLE,
            f"the coordinator's object store has been unreachable for "
            f"{time.time() - self.since:.0f} s ({self.error}) and its ingest journal holds "
            f"{held / (1 << 20):.1f} MiB of games not yet in the store (store_outage_journal_mb "
            f"= {self.journal_bound / (1 << 20):g}): keep the games and retry later",
        )
