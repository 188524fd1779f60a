"""Files sent in chunks from an offset (model downloads, shard downloads), from a local file
or from an object of the blob store (one ranged read per chunk)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from kgrpc.blobstore import BlobStoreError
from kgrpc.coordinator.blobs import BlobRef, unavailable
from kgrpc.coordinator.errors import CoordinatorError

CHUNK_BYTES = 1 << 20


def check_offset(offset: int, size: int) -> None:
    """OUT_OF_RANGE unless a download may start at ``offset`` of a ``size``-byte file."""
    if not 0 <= offset <= size:
        raise CoordinatorError(grpc.StatusCode.OUT_OF_RANGE, f"offset {offset} outside 0..{size}")


async def read_chunks(path: Path | BlobRef, offset: int) -> AsyncIterator[tuple[int, bytes]]:
    """(offset, data) of ``path`` from ``offset`` to its end, :data:`CHUNK_BYTES` at a time;
    the file (or the object) is read off the event loop. A store that cannot be reached is
    UNAVAILABLE (the client resumes from the offset it has)."""
    if isinstance(path, BlobRef):
        async for item in _read_object(path, offset):
            yield item
        return
    f = await asyncio.to_thread(open, path, "rb")
    try:
        await asyncio.to_thread(f.seek, offset)
        while True:
            data = await asyncio.to_thread(f.read, CHUNK_BYTES)
            if not data:
                return
            yield offset, data
            offset += len(data)
    finally:
        f.close()


async def _read_object(ref: BlobRef, offset: int) -> AsyncIterator[tuple[int, bytes]]:
    try:
        size = await asyncio.to_thread(ref.store.size, ref.key)
        while offset < size:
            data = await asyncio.to_thread(
                ref.store.get_range, ref.key, offset, min(CHUNK_BYTES, size - offset)
            )
            if not data:
                return
            yield offset, data
            offset += len(data)
    except BlobStoreError as exc:
        raise unavailable(exc) from None
