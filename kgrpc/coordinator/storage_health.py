"""Storage failures the coordinator survives, answered and logged once per incident.

A full disk (ENOSPC, EDQUOT, SQLite's "database or disk is full") makes every call that writes
answer RESOURCE_EXHAUSTED, and a failing one (EIO, EROFS, SQLite I/O errors) UNAVAILABLE: both
are retried by clients, whose data stays with them meanwhile (a worker keeps its spool). The
first failure of an incident is logged as one ERROR line, without a traceback; the incident
ends, with one WARNING line, at the first write that succeeds again.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from pathlib import Path

import grpc

from kgrpc.coordinator.errors import CoordinatorError
from kgrpc.coordinator.pg import IndexUnavailable

log = logging.getLogger("kgrpc.coordinator")

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
BROKEN_ERRNOS = frozenset({errno.EIO, errno.EROFS})
_SQLITE_FULL = getattr(sqlite3, "SQLITE_FULL", 13)
_SQLITE_BROKEN = frozenset(
    {getattr(sqlite3, "SQLITE_IOERR", 10), getattr(sqlite3, "SQLITE_READONLY", 8)}
)


def classify(exc: BaseException) -> grpc.StatusCode | None:
    """RESOURCE_EXHAUSTED for a full disk, UNAVAILABLE for a failing one, None otherwise."""
    if isinstance(exc, OSError):
        if exc.errno in FULL_ERRNOS:
            return grpc.StatusCode.RESOURCE_EXHAUSTED
        if exc.errno in BROKEN_ERRNOS:
            return grpc.StatusCode.UNAVAILABLE
    elif isinstance(exc, IndexUnavailable):
        return grpc.StatusCode.UNAVAILABLE
    elif isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            code &= 0xFF  # extended result codes carry the primary one in the low byte
        if code == _SQLITE_FULL:
            return grpc.StatusCode.RESOURCE_EXHAUSTED
        if code in _SQLITE_BROKEN:
            return grpc.StatusCode.UNAVAILABLE
    return None


class StorageHealth:
    """The state of the data dir's disk: one incident at a time."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.incident = ""  # what went wrong first, while an incident lasts

    def failed(self, exc: BaseException) -> CoordinatorError | None:
        """The error to answer for ``exc`` (None: not a storage failure, let it through)."""
        code = classify(exc)
        if code is None:
            return None
        full = code == grpc.StatusCode.RESOURCE_EXHAUSTED
        if not self.incident:
            self.incident = f"{type(exc).__name__}: {exc}"
            log.error(
                "storage %s (data dir %s: %s): calls that write answer %s until it is "
                "fixed; clients keep their data and retry",
                "unreachable"
                if isinstance(exc, IndexUnavailable)
                else "full"
                if full
                else "failing",
                self.data_dir,
                self.incident,
                code.name,
            )
        if isinstance(exc, IndexUnavailable):
            return CoordinatorError(
                code, "the coordinator's index (PostgreSQL) is unreachable: retry later"
            )
        what = "disk is full" if full else "disk is failing"
        return CoordinatorError(code, f"the coordinator's {what}: retry later")

    def wrote(self) -> None:
        """A write succeeded: the incident, if any, is over."""
        if self.incident:
            log.warning("storage works again (data dir %s) after: %s", self.data_dir, self.incident)
            self.incident = ""


class ReadOnlyDataDir(ValueError):
    """The data directory cannot be written: a start-up error (one line, exit 2), not an
    incident to retry."""


READ_ONLY_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def check_writable(data_dir: Path) -> None:
    """Create ``data_dir`` if needed and write (then remove) a probe file in it; a read-only
    directory or file system raises :class:`ReadOnlyDataDir` saying so. Run first at start-up:
    otherwise the first write (the index's schema) fails as if the disk were failing."""
    probe = data_dir / f".kgrpc-write-probe-{os.getpid()}"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.close(fd)
        probe.unlink()
    except OSError as exc:
        if exc.errno not in READ_ONLY_ERRNOS:
            raise
        what = "read-only file system" if exc.errno == errno.EROFS else "no write permission"
        raise ReadOnlyDataDir(
            f"the data directory {data_dir} is read-only ({what}): the coordinator writes its "
            "index, ingest journal, shards and models there; make it writable or give another "
            "--data-dir"
        ) from None
