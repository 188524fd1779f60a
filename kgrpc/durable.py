"""Crash-safe file writes, used by every component that stores something.

``atomic_write_bytes`` writes to a unique temporary file in the same directory, fsyncs it,
renames it over the target and fsyncs the directory: a reader (or a process restarted after
a crash at any moment) sees either the old file or the whole new one, never a part, and an
acknowledged write survives a power cut. ``atomic_write_many`` does the same for many files at
once, with one fsync per directory instead of one per file. ``fsync_dir`` makes a rename or an
unlink durable.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import tempfile
from pathlib import Path


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def _write_synced(path: Path, data: bytes) -> None:
    """``data`` in ``path``: a unique temporary file, fsynced, renamed over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_many(items: list[tuple[Path, bytes]], threads: int = 8) -> None:
    """:func:`atomic_write_bytes` for each ``(path, data)``, parent directories made as needed;
    each directory is fsynced once after all renames. The files are written and fsynced by up
    to ``threads`` threads at once: the file system commits concurrent fsyncs together, several
    times faster than one after another. On an error the first one is raised; files renamed
    by then stay (each is whole), no temporary file is left."""
    dirs: dict[Path, None] = {}
    for path, _ in items:
        if not path.parent.is_dir():
            # New directories: their entries in their parents must be made durable too.
            new = path.parent
            while not new.is_dir():
                dirs[new.parent] = None
                new = new.parent
            path.parent.mkdir(parents=True, exist_ok=True)
        dirs[path.parent] = None
    workers = max(1, min(threads, len(items)))
    if workers == 1:
        for path, data in items:
            _write_synced(path, data)
    else:
        with concurrent.futures.ThreadPoolExecutor(workers,
                                                   thread_name_prefix="kgrpc-write") as pool:
            for done in [pool.submit(_write_synced, p, d) for p, d in items]:
                done.result()
    for d in dirs:
        fsync_dir(d)
