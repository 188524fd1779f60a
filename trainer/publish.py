"""Publish a model file to the coordinator: the ``PublishModel`` client stream.

Stream layout (coordinator.proto): one ``PublishModelRequest`` with ``header`` (name, sha256,
size, blocks, channels, training steps/rows, feature version: all read from the ONNX file's
``kgrpc.*`` metadata props, docs/formats.md section 5), then ``data`` chunks of at most
``chunk_bytes`` in file order. Needs a trainer token. The reply says whether the coordinator
released the model at once or scheduled a gating match; the trainer only logs it. A model of
another feature version is refused here already (the coordinator refuses it too).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from kgrpc.net import make_channel
from kgrpc.schema import ModelMetadata, check_feature_version
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from trainer.export import read_metadata
from trainer.naming import parse_name

CHUNK_BYTES = 1 << 20


def build_header(path: str | os.PathLike[str]) -> coordinator_pb2.PublishHeader:
    """Header from the file's bytes and metadata; ValueError on a file that is not ours."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such model file")
    try:
        meta = read_metadata(p)  # ValueError without kgrpc.name
    except ValueError:
        raise
    except Exception as exc:  # onnx raises its own DecodeError on a file that is not ONNX
        raise ValueError(f"{p}: not an ONNX model: {exc}") from exc
    md = ModelMetadata.from_meta(meta, str(p))
    check_feature_version(md.feature_version, f"model file {p}")
    name, blocks, channels = md.name, md.blocks, md.channels
    parsed = parse_name(name)  # the coordinator rejects other names; fail early and clearly
    steps = md.training_steps if "training_steps" in meta else parsed.steps
    rows = md.training_rows if "training_rows" in meta else parsed.rows
    if (parsed.blocks, parsed.channels) != (blocks, channels):
        raise ValueError(f"{p}: name {name} says b{parsed.blocks}c{parsed.channels} but the "
                         f"metadata says b{blocks}c{channels}")
    sha = hashlib.sha256()
    size = 0
    with open(p, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            sha.update(chunk)
            size += len(chunk)
    return coordinator_pb2.PublishHeader(
        name=name, sha256=sha.hexdigest(), size_bytes=size, blocks=blocks, channels=channels,
        training_steps=steps, training_rows=rows, feature_version=md.feature_version)


async def _requests(path: Path, header: coordinator_pb2.PublishHeader,
                    chunk_bytes: int) -> AsyncIterator[coordinator_pb2.PublishModelRequest]:
    yield coordinator_pb2.PublishModelRequest(header=header)
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            yield coordinator_pb2.PublishModelRequest(data=chunk)


async def publish_model(address: str, token: str, path: str | os.PathLike[str], *,
                        tls_ca: str | None = None, chunk_bytes: int = CHUNK_BYTES,
                        timeout_s: float = 300.0) -> coordinator_pb2.PublishModelResponse:
    """Stream ``path`` to the coordinator; returns its reply (raises grpc.aio.AioRpcError)."""
    if not token:
        raise ValueError("publishing needs a trainer token (--token or $KGRPC_TRAINER_TOKEN)")
    p = Path(path)
    header = build_header(p)
    async with make_channel(address, token=token, tls_ca=tls_ca or None) as channel:
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        return await stub.PublishModel(_requests(p, header, chunk_bytes), timeout=timeout_s)


def publish_model_sync(address: str, token: str, path: str | os.PathLike[str],
                       **kw: object) -> coordinator_pb2.PublishModelResponse:
    """For the synchronous training loop: a private event loop per call."""
    return asyncio.run(publish_model(address, token, path, **kw))  # type: ignore[arg-type]


def describe_response(resp: coordinator_pb2.PublishModelResponse) -> str:
    what = "gating match scheduled" if resp.gating_scheduled else "released"
    return f"published {resp.model.name} ({resp.model.size_bytes} bytes): {what}"
