"""Receiving a PublishModel stream: header first, then the ONNX bytes, written to a temporary
file, size and sha256 checked, then committed through :class:`~kgrpc.coordinator.models.Models`.
An fp32 file creates the model (released at once, or scheduled for gating); an fp16 or int8
file is added to a model whose fp32 file is stored, checked against it (parity). The same file
published again is answered with the stored model; other content under an existing name and
precision is ALREADY_EXISTS.

With a blob store other than DATA_DIR, the checked file is put into it (create-only, key
``models/<file name>``) before its row is committed, and kept under DATA_DIR/models/ as well.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from kgrpc.blobstore import BlobExistsError, BlobStore, BlobStoreError
from kgrpc.coordinator import blobs, model_check
from kgrpc.coordinator.errors import CoordinatorError, invalid
from kgrpc.coordinator.models import Models
from kgrpc.parity import ParityBounds
from kgrpc.precision import FP32, variant_file_name
from kgrpc.v1 import common_pb2, coordinator_pb2

log = logging.getLogger("kgrpc.coordinator")


@dataclass(frozen=True)
class Published:
    model: common_pb2.ModelInfo
    gating_scheduled: bool
    announce: bool  # a new release, or a file added to the current one: tell the watchers
    precision: str = FP32  # of the file published


async def receive_model(
    requests: AsyncIterator[coordinator_pb2.PublishModelRequest],
    models: Models,
    models_dir: Path,
    max_bytes: int,
    on_storage: Callable[..., Awaitable[Any]],
    curriculum: Iterable[Any] = (),
    bounds: ParityBounds | None = None,
    store: BlobStore | None = None,
) -> Published:
    """Store the model file of one PublishModel stream; ``on_storage(fn, *args)`` runs ``fn``
    on the thread that owns ``models``. INVALID_ARGUMENT for a malformed stream or a file that
    fails :func:`kgrpc.coordinator.model_check.check_published` (run at every board size of
    ``curriculum``; an fp16/int8 file within the parity ``bounds`` of the fp32 file)."""
    it = requests.__aiter__()
    try:
        first = await it.__anext__()
    except StopAsyncIteration:
        raise invalid("empty PublishModel stream: the first message must be the header") from None
    if not first.HasField("header"):
        raise invalid("the first PublishModel message must be the header")
    h = first.header
    precision = await on_storage(models.check_header, h, max_bytes)
    same = await on_storage(models.existing_same, h)
    tmp = models_dir / f".{h.name}.{precision}.onnx.tmp{uuid.uuid4().hex[:8]}"
    sha = hashlib.sha256()
    size = 0
    f = await asyncio.to_thread(open, tmp, "wb")
    try:
        try:
            async for msg in it:
                if msg.HasField("header"):
                    raise invalid("a second header in one PublishModel stream")
                size += len(msg.data)
                if size > h.size_bytes:
                    raise invalid(f"more data than the declared size_bytes {h.size_bytes}")
                sha.update(msg.data)
                await asyncio.to_thread(f.write, msg.data)
            await asyncio.to_thread(f.flush)
            await asyncio.to_thread(os.fsync, f.fileno())
        finally:
            f.close()
        if size != h.size_bytes:
            raise invalid(f"received {size} bytes, header declared {h.size_bytes}")
        if sha.hexdigest() != h.sha256:
            raise invalid(
                f"sha256 mismatch: received data hashes to {sha.hexdigest()}, "
                f"header says {h.sha256}"
            )
        if same is not None:
            candidate = same.status == common_pb2.MODEL_STATUS_CANDIDATE
            return Published(same, candidate, announce=False, precision=precision)
        reference = None if precision == FP32 else await on_storage(models.path, h.name)
        if reference is not None and store is not None:
            # Published through another replica: its fp32 file is in the store only.
            await _fetch_model(store, reference)
        await model_check.check_published(tmp, h, curriculum, reference=reference, bounds=bounds)
        if store is not None:
            await _put_model(store, models_dir, variant_file_name(h.name, precision), tmp)
        try:
            done = await on_storage(models.commit, h, tmp)
        except sqlite3.IntegrityError:
            raise CoordinatorError(
                grpc.StatusCode.ALREADY_EXISTS, f"model {h.name!r} already has a {precision} file"
            ) from None
    finally:
        tmp.unlink(missing_ok=True)
    if precision != FP32:
        log.info("model %s: %s file added", h.name, precision)
    else:
        log.info(
            "model %s published (%s)",
            h.name,
            "gating scheduled" if done.gating_scheduled else "released",
        )
    return Published(done.model, done.gating_scheduled, done.announce, precision)


async def _put_model(store: BlobStore, models_dir: Path, file_name: str, tmp: Path) -> None:
    """Put a checked model file into the store before its row (nothing to do when the store
    is DATA_DIR, where :meth:`Models.commit` moves it)."""
    key = blobs.model_key(file_name)
    if blobs.in_place(store, key, models_dir / file_name):
        return
    try:
        await asyncio.to_thread(store.put_file, key, tmp, create_only=True)
    except BlobExistsError:
        raise CoordinatorError(
            grpc.StatusCode.ALREADY_EXISTS,
            f"the store already holds {key} with different content",
        ) from None
    except BlobStoreError as exc:
        raise blobs.unavailable(exc) from None


async def _fetch_model(store: BlobStore, path: Path) -> None:
    """Download a model file the store has and DATA_DIR lacks (atomically, to ``path``)."""
    key = blobs.model_key(path.name)
    if path.exists() or blobs.in_place(store, key, path):
        return
    try:
        await asyncio.to_thread(store.download, key, path)
    except BlobStoreError as exc:
        raise blobs.unavailable(exc) from None
