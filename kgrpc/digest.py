"""Size and SHA-256 of a file, read in chunks: how models, shards and downloads are identified
(``sha256`` fields of the protocol, the shard index, the worker's model cache)."""

from __future__ import annotations

import hashlib
import os
from typing import NamedTuple

CHUNK_BYTES = 1 << 20


class FileDigest(NamedTuple):
    size: int
    sha256: str  # lowercase hex


def file_digest(path: str | os.PathLike[str]) -> FileDigest:
    """Read in 1 MiB chunks: models and shards run to hundreds of MB."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
            size += len(chunk)
    return FileDigest(size, h.hexdigest())
