"""Files sent in chunks from an offset (model downloads, shard downloads)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from kgrpc.coordinator.errors import CoordinatorError

CHUNK_BYTES = 1 << 20


def check_offset(offset: int, size: int) -> None:
    """OUT_OF_RANGE unless a download may start at ``offset`` of a ``size``-byte file."""
    if not 0 <= offset <= size:
        raise CoordinatorError(grpc.StatusCode.OUT_OF_RANGE, f"offset {offset} outside 0..{size}")


async def read_chunks(path: Path, offset: int) -> AsyncIterator[tuple[int, bytes]]:
    """(offset, data) of ``path`` from ``offset`` to its end, :data:`CHUNK_BYTES` at a time;
    the file is read off the event loop."""
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
