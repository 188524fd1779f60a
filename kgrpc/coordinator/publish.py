"""Receiving a PublishModel stream: header first, then the ONNX bytes, written to a temporary
file, size and sha256 checked, then committed through :class:`~kgrpc.coordinator.models.Models`
(released at once, or scheduled for gating). The same model published again is answered with
the stored one; a different model under an existing name is ALREADY_EXISTS.
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

from kgrpc.coordinator import model_check
from kgrpc.coordinator.errors import CoordinatorError, invalid
from kgrpc.coordinator.models import Models
from kgrpc.v1 import common_pb2, coordinator_pb2

log = logging.getLogger("kgrpc.coordinator")


@dataclass(frozen=True)
class Published:
    model: common_pb2.ModelInfo
    gating_scheduled: bool
    released: bool  # the new best model: announce it


async def receive_model(
    requests: AsyncIterator[coordinator_pb2.PublishModelRequest],
    models: Models,
    models_dir: Path,
    max_bytes: int,
    on_storage: Callable[..., Awaitable[Any]],
    curriculum: Iterable[Any] = (),
) -> Published:
    """Store the model of one PublishModel stream; ``on_storage(fn, *args)`` runs ``fn`` on
    the thread that owns ``models``. INVALID_ARGUMENT for a malformed stream or a file that
    fails :func:`kgrpc.coordinator.model_check.check_published` (run at every board size of
    ``curriculum``)."""
    it = requests.__aiter__()
    try:
        first = await it.__anext__()
    except StopAsyncIteration:
        raise invalid("empty PublishModel stream: the first message must be the header") from None
    if not first.HasField("header"):
        raise invalid("the first PublishModel message must be the header")
    h = first.header
    await on_storage(models.check_header, h, max_bytes)
    same = await on_storage(models.existing_same, h)
    tmp = models_dir / f".{h.name}.onnx.tmp{uuid.uuid4().hex[:8]}"
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
            return Published(same, gating_scheduled=candidate, released=False)
        await model_check.check_published(tmp, h, curriculum)
        try:
            info, gating, released = await on_storage(models.commit, h, tmp)
        except sqlite3.IntegrityError:
            raise CoordinatorError(
                grpc.StatusCode.ALREADY_EXISTS, f"model {h.name!r} already exists"
            ) from None
    finally:
        tmp.unlink(missing_ok=True)
    log.info("model %s published (%s)", h.name, "gating scheduled" if gating else "released")
    return Published(info, gating_scheduled=gating, released=released)
