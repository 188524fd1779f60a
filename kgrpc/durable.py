"""Crash-safe file writes, used by every component that stores something.

``atomic_write_bytes`` writes to a unique temporary file in the same directory, fsyncs it,
renames it over the target and fsyncs the directory: a reader (or a process restarted after
a crash at any moment) sees either the old file or the whole new one, never a part, and an
acknowledged write survives a power cut. ``atomic_writer`` is the same for a file
written piece by piece (too large to hold in memory). ``fsync_dir`` makes a rename or an
unlink durable. ``write_unsynced`` writes files in place, for stores whose own index is what
makes a file visible (a file without its index row is never read): no temporary file, no
rename, made durable later by ``sync_files``.

``sync_files`` makes many files durable with one ``syncfs(2)`` of their file system where
Linux offers it (a per-file fsync costs a journal commit's worth of kernel time each), and
with an fsync per file and directory elsewhere.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so that renames and unlinks in it survive a crash.

    Windows cannot open a directory for this (NTFS journals metadata itself): a no-op there.
    Elsewhere an I/O error is raised, not hidden: the caller's write is not durable.
    """
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mkdir: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp file, fsync, rename)."""
    path = Path(path)
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[Any]:
    """A binary file to write ``path``'s new content into; on a normal exit it is fsynced and
    renamed over ``path`` (and the directory fsynced), on an exception removed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parallel(fn: Callable[..., None], calls: list[tuple[Any, ...]], threads: int) -> None:
    """``fn(*args)`` for each of ``calls``, up to ``threads`` at once; the first error raised
    after all have run. Concurrent fsyncs are committed together by the file system, several
    times faster than one after another."""
    workers = max(1, min(threads, len(calls)))
    if workers == 1:
        for args in calls:
            fn(*args)
        return
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="kgrpc-write") as pool:
        for done in [pool.submit(fn, *args) for args in calls]:
            done.result()


def write_unsynced(items: list[tuple[Path, bytes]]) -> set[Path]:
    """Write each ``(path, data)`` in place (created or truncated; parent directories made as
    needed), unsynced and one after another; return the directories whose entries changed.

    Not atomic: a crash can leave a file cut short. Only for files that nothing reads before
    :func:`sync_files` has made them durable and the caller has recorded them (the SGF
    archive's index row, kgrpc.coordinator.archive): a cut-short file then has no row and is
    never read. On an error the first one is raised; files written by then stay."""
    dirs: dict[Path, None] = {}
    made: set[Path] = set()
    for path, data in items:
        parent = path.parent
        if parent not in made:
            new = parent
            while not new.is_dir():
                dirs[new.parent] = None
                new = new.parent
            parent.mkdir(parents=True, exist_ok=True)
            made.add(parent)
            dirs[parent] = None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    return set(dirs)


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs  # glibc 2.14+, musl
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _load_syncfs()


def syncfs_available() -> bool:
    """Whether :func:`sync_files` can sync a file system with one ``syncfs(2)``."""
    return _SYNCFS is not None


def _syncfs(path: Path) -> None:
    assert _SYNCFS is not None
    fd = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", str(path))
    finally:
        os.close(fd)


def sync_files(paths: list[Path], dirs: set[Path], *, threads: int = 8) -> None:
    """Make ``paths`` and the entries of ``dirs`` durable: what :func:`write_unsynced` left
    to do.

    Where every one of ``dirs`` (which must hold the parents of ``paths``) lies on one file
    system and Linux's ``syncfs(2)`` is there, one call syncs them all: it writes the whole
    file system's dirty data, so it costs the caller a wait, not a journal commit per file.
    (Kernels before 5.8 do not report a write-back error through ``syncfs``; an fsync does.)
    Otherwise each path is fsynced (up to ``threads`` at once), then each directory."""
    if _SYNCFS is not None and dirs:
        devices = {os.stat(d).st_dev for d in dirs}
        if len(devices) == 1:
            _syncfs(next(iter(dirs)))
            return
    _parallel(_fsync_file, [(p,) for p in paths], threads)
    for d in dirs:
        fsync_dir(d)
