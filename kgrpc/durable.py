"""Crash-safe file writes, used by every component that stores something.

``atomic_write_bytes`` writes to a unique temporary file in the same directory, fsyncs it,
renames it over the target and fsyncs the directory: a reader (or a process restarted after
a crash at any moment) sees either the old file or the whole new one, never a part, and an
acknowledged write survives a power cut. ``atomic_write_many`` does the same for many files at
once, with one fsync per directory instead of one per file. ``fsync_dir`` makes a rename or an
unlink durable.
"""

from __future__ import annotations

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


def atomic_write_many(items: list[tuple[Path, bytes]]) -> None:
    """:func:`atomic_write_bytes` for each ``(path, data)``, parent directories made as needed;
    every file is fsynced, each directory once after all renames. On an error the files
    renamed so far stay (each is whole), the others are not written."""
    dirs: dict[Path, None] = {}
    for path, data in items:
        if not path.parent.is_dir():
            # New directories: their entries in their parents must be made durable too.
            new = path.parent
            while not new.is_dir():
                dirs[new.parent] = None
                new = new.parent
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
        dirs[path.parent] = None
    for d in dirs:
        fsync_dir(d)
