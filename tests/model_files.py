"""Real model files for tests that publish (the coordinator checks every published file).

One torch export per (architecture, seed, board sizes), cached for the test process; any
name is then stamped into a copy's metadata (name, training steps and rows), which is what
the publish check compares with the published name. Milliseconds per name after the first.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from kgrpc.schema import MODEL_META_PREFIX as META_PREFIX
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
