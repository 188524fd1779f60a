"""The blob store interface: named, immutable-once-written byte objects under '/'-separated keys.

A key is a relative path such as ``training_data/run_001/games_00001.npz`` or
``models/NAME.onnx``: segments of printable characters, no empty, ``.`` or ``..`` segment,
no leading ``/``, no backslash. Every backend guarantees:

* a put is atomic: a reader sees the old object (or none) or the whole new one, never a part;
* ``create_only=True`` never replaces an object: putting the same bytes again succeeds (a
  replayed upload), different bytes raise :class:`BlobExistsError`;
* a download to a local path is atomic too (temporary file, fsync, rename);
* every failure to reach the store (connection refused, timeouts, 5xx) is
  :class:`BlobUnavailableError`, which the caller may retry; a missing object is
  :class:`BlobNotFoundError`; a wrong key, credentials or bucket is :class:`BlobStoreError`.

None of these are ``OSError``: the coordinator answers a store outage differently from a
failing local disk (kgrpc.coordinator.storage_health).
"""

from __future__ import annotations

import abc
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_SEGMENT = re.compile(r"^[^/\\\x00-\x1f]+$")


class BlobStoreError(Exception):
    """A blob store operation failed for a reason a retry will not fix (bad key, credentials,
    missing bucket)."""


class BlobUnavailableError(BlobStoreError):
    """The store could not be reached or answered a server error: retry later."""


class BlobNotFoundError(BlobStoreError):
    """No object under this key."""


class BlobExistsError(BlobStoreError):
    """A create-only put found a different object under the key."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


def check_key(key: str) -> str:
    """``key`` when it is a valid relative key, else ValueError saying why."""
    if not isinstance(key, str) or not key:
        raise ValueError("a blob key must be a non-empty string")
    for seg in key.split("/"):
        if seg in ("", ".", "..") or not _SEGMENT.match(seg):
            raise ValueError(f"bad blob key {key!r}: segments must be names, not {seg!r}")
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: "" (everything) or a key, optionally ending with ``/``."""
    if prefix:
        check_key(prefix.rstrip("/"))
    return prefix


def bytes_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore(abc.ABC):
    """One store of objects; methods block (call them off the event loop)."""

    url: str  # what the store was opened from, without credentials

    @abc.abstractmethod
    def put_bytes(self, key: str, data: bytes, *, create_only: bool = False) -> ObjectInfo:
        """Store ``data`` under ``key`` atomically (and durably, once this returns)."""

    @abc.abstractmethod
    def put_file(
        self, key: str, path: str | os.PathLike[str], *, create_only: bool = False
    ) -> ObjectInfo:
        """Store the file at ``path`` under ``key`` atomically (read in parts, not held in
        memory where the backend can avoid it). On the local backend, ``path`` may be the
        object's own file (:meth:`local_path`): it is then only checked to be there."""

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """The whole object."""

    @abc.abstractmethod
    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer only at the object's end; b"" at or past
        it). ValueError for a negative offset or length."""

    @abc.abstractmethod
    def download(self, key: str, path: str | os.PathLike[str]) -> ObjectInfo:
        """Write the object to ``path`` atomically (parent directories are made)."""

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """The object's size, or None when there is none."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; no error when there is none."""

    @abc.abstractmethod
    def check(self) -> None:
        """Reach the store once: BlobStoreError (or BlobUnavailableError) with one line saying
        what is wrong (the address, the credentials, the bucket), else return."""

    def local_path(self, key: str) -> Path | None:
        """The object's file on this machine, for a backend that keeps one (the local
        directory); None for a remote store."""
        return None

    @property
    def is_local(self) -> bool:
        return False

    def exists(self, key: str) -> bool:
        return self.stat(key) is not None

    def size(self, key: str) -> int:
        info = self.stat(key)
        if info is None:
            raise BlobNotFoundError(f"no object {key!r} in {self.url}")
        return info.size

    def close(self) -> None:  # noqa: B027 - optional for backends
        """Release connections (optional)."""

    def iter_range(
        self, key: str, offset: int = 0, chunk: int = 1 << 20
    ) -> Iterator[tuple[int, bytes]]:
        """(offset, data) of the object from ``offset`` to its end, ``chunk`` bytes at a
        time: what downloads stream."""
        size = self.size(key)
        while offset < size:
            data = self.get_range(key, offset, min(chunk, size - offset))
            if not data:
                return
            yield offset, data
            offset += len(data)


def same_content(store: BlobStore, key: str, data: bytes) -> bool:
    """Whether the object under ``key`` holds exactly ``data`` (a replayed create-only put)."""
    info = store.stat(key)
    if info is None or info.size != len(data):
        return False
    return bytes_digest(store.get_bytes(key)) == bytes_digest(data)
