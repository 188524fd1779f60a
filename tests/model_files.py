"""Real model files for tests that publish (the coordinator checks every published file), and
publishing them over PublishModel with the trainer token.

One torch export per (architecture, seed, board sizes), cached for the test process; any
name is then stamped into a copy's metadata (name, training steps and rows), which is what
the publish check compares with the published name. Milliseconds per name after the first.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import onnx

from kgrpc.schema import FEATURE_VERSION
from kgrpc.schema import MODEL_META_PREFIX as META_PREFIX
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from trainer.naming import parse_name

_BASE: dict[tuple[int, int, int, tuple[int, ...]], bytes] = {}


def _base(blocks: int, channels: int, seed: int, sizes: tuple[int, ...]) -> bytes:
    key = (blocks, channels, seed, sizes)
    if key not in _BASE:
        import torch

        from trainer.export import export_onnx
        from trainer.model import KgrpcNet

        torch.manual_seed(seed)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m.onnx"
            export_onnx(
                KgrpcNet(blocks, channels).eval(),
                path,
                name=f"kg-b{blocks}c{channels}-s0-d0",
                board_sizes=sizes,
            )
            _BASE[key] = path.read_bytes()
    return _BASE[key]


def model_bytes(
    name: str, *, seed: int = 0, board_sizes: tuple[int, ...] = (5, 9), **meta: str
) -> bytes:
    """A real model file of the name's architecture whose metadata matches ``name``;
    ``meta`` overrides metadata values (keys without the ``kgrpc.`` prefix)."""
    p = parse_name(name)
    proto = onnx.load_from_string(_base(p.blocks, p.channels, seed, tuple(board_sizes)))
    values = {"name": name, "training_steps": str(p.steps), "training_rows": str(p.rows), **meta}
    for prop in proto.metadata_props:
        key = prop.key[len(META_PREFIX) :]
        if key in values:
            prop.value = values[key]
    return proto.SerializeToString()


def write_model(path: Path, name: str, **kw: object) -> Path:
    path.write_bytes(model_bytes(name, **kw))  # type: ignore[arg-type]
    return path


def publish_requests(
    name: str, data: bytes, *, sha: str | None = None, size: int | None = None
) -> list[coordinator_pb2.PublishModelRequest]:
    """A PublishModel stream: the header (``sha``, ``size``: other values than the data's,
    for the integrity tests), then the data in parts of 1000 bytes."""
    h = coordinator_pb2.PublishHeader(
        name=name,
        sha256=sha or hashlib.sha256(data).hexdigest(),
        size_bytes=len(data) if size is None else size,
        feature_version=FEATURE_VERSION,
    )
    msgs = [coordinator_pb2.PublishModelRequest(header=h)]
    msgs += [
        coordinator_pb2.PublishModelRequest(data=data[i : i + 1000])
        for i in range(0, len(data), 1000)
    ]
    return msgs


async def publish(
    coord: Any, name: str, data: bytes | None = None, **kw: Any
) -> coordinator_pb2.PublishModelResponse:
    """Publish ``data`` (default: a real model file named ``name``, which the coordinator's
    model check passes) to ``coord`` (a RunningCoordinator) with the trainer token."""
    if data is None:
        data = model_bytes(name)
    async with coord.channel("trainer") as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).PublishModel(
            iter(publish_requests(name, data, **kw))
        )
