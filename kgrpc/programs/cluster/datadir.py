"""Claiming ``--data-dir``: ``kgrpc-cluster`` never deletes a directory it did not create.

A directory it creates (or finds empty) gets a marker file, :data:`MARKER`. A later run may
empty a marked directory (the default) or keep what is in it (``--keep``); a non-empty
directory without the marker is refused and left exactly as it was. The directory itself is
never removed, only what a marked one holds, and the marker goes last: a clean-up cut short
leaves a directory that is still recognised as a run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kgrpc.durable import atomic_write_bytes

MARKER = ".kgrpc-cluster-run"
MARKER_TEXT = (
    "This directory was created by kgrpc-cluster for its data, models and logs.\n"
    "kgrpc-cluster deletes everything in it when it starts a new run here (unless --keep).\n"
)


class DataDirError(ValueError):
    """``--data-dir`` cannot be used; the message is one line and says why."""


def is_cluster_run(root: Path) -> bool:
    return (root / MARKER).is_file()


def prepare_data_dir(root: Path, *, fresh: bool) -> None:
    """Make ``root`` ready for a run: create and mark it, or reuse one of our own runs.

    ``fresh`` empties an earlier run first. Raises :class:`DataDirError`, having touched
    nothing, when ``root`` is not a directory or holds anything without being a marked run.
    """
    if root.exists() and not root.is_dir():
        raise DataDirError(f"--data-dir {root} exists and is not a directory")
    if root.is_dir() and any(root.iterdir()):
        if not is_cluster_run(root):
            raise DataDirError(
                f"--data-dir {root} is not empty and is not a kgrpc-cluster run (no {MARKER} "
                "file); nothing was deleted: choose a new or empty directory"
            )
        if fresh:
            _empty_run(root)
    root.mkdir(parents=True, exist_ok=True)
    if not is_cluster_run(root):
        atomic_write_bytes(root / MARKER, MARKER_TEXT.encode())


def _empty_run(root: Path) -> None:
    """Delete everything in the marked run ``root`` but the marker (links, not their targets)."""
    for entry in root.iterdir():
        if entry.name == MARKER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
