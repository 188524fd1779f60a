"""Training checkpoints: ``WORK_DIR/checkpoints/ckpt_{step:010d}.pt``.

One ``torch.save`` dict per file, written atomically (temp file, fsync, rename) so a crash
leaves either the previous checkpoint or the new one, never half a file:

- ``format``: 1
- ``model``: the (unwrapped) KgrpcNet ``state_dict``; ``blocks``, ``channels``
- ``optimizer``: the Adam ``state_dict``
- ``state``: :class:`TrainState` as a dict (step and data-row counters)
- ``config``: the TrainConfig used (token excluded), for the record
- ``average`` (only with ``ema_samples``): the averaged weights the exports come from,
  ``{"model": state_dict, "samples": n}`` (:mod:`trainer.averaging`)

``latest_checkpoint`` picks the highest step; ``run`` resumes from it.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kgrpc.durable import atomic_write_bytes
from trainer.model import KgrpcNet

FORMAT = 1
_CKPT_RE = re.compile(r"^ckpt_(\d+)\.pt$")


@dataclass
class TrainState:
    step: int = 0  # optimiser steps taken (the ``s`` of model names)
    samples: int = 0  # training samples consumed (steps x batch x processes)
    data_rows: int = 0  # data rows that existed when the current weights' data was loaded
    last_export_rows: int = 0  # data rows at the last export (for ``min_new_rows``)
    generation: int = 0  # exports done
    credit: float = 0.0  # samples_per_row: samples owed to the data, not yet trained
    credited_rows: int = 0  # samples_per_row: data rows already turned into credit
    last_model: str = ""  # name of the last exported model


def checkpoint_path(ckpt_dir: Path, step: int) -> Path:
    return ckpt_dir / f"ckpt_{step:010d}.pt"


def list_checkpoints(ckpt_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    out = [(int(m.group(1)), p) for p in d.iterdir() if (m := _CKPT_RE.match(p.name))]
    return sorted(out)


def latest_checkpoint(ckpt_dir: str | os.PathLike[str]) -> Path | None:
    found = list_checkpoints(ckpt_dir)
    return found[-1][1] if found else None


def save_checkpoint(
    ckpt_dir: str | os.PathLike[str],
    model: KgrpcNet,
    optimizer: torch.optim.Optimizer,
    state: TrainState,
    config: dict[str, Any] | None = None,
    keep: int = 3,
    average: dict[str, Any] | None = None,
) -> Path:
    d = Path(ckpt_dir)
    payload = {
        "format": FORMAT,
        "blocks": model.blocks,
        "channels": model.channels,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "state": dataclasses.asdict(state),
        "config": config or {},
    }
    if average is not None:
        payload["average"] = average
    buf = io.BytesIO()
    torch.save(payload, buf)
    path = checkpoint_path(d, state.step)
    atomic_write_bytes(path, buf.getvalue(), mkdir=True)
    for _, old in list_checkpoints(d)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(
    path: str | os.PathLike[str], map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many kinds for a bad file
        raise ValueError(f"{path}: not a readable checkpoint: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path}: not a kgrpc checkpoint (format {FORMAT})")
    return payload


def model_from_checkpoint(payload: dict[str, Any]) -> KgrpcNet:
    """The net of a checkpoint, with the opponent-reply head when it was trained with one."""
    has_opp = any(k.startswith("opp_") for k in payload["model"])
    model = KgrpcNet(int(payload["blocks"]), int(payload["channels"]), opponent_policy=has_opp)
    model.load_state_dict(payload["model"])
    return model


def exported_model_from_checkpoint(payload: dict[str, Any]) -> KgrpcNet:
    """The weights a release is made of: the averaged ones when the checkpoint has them."""
    model = model_from_checkpoint(payload)
    average = payload.get("average")
    if average is not None:
        model.load_state_dict(average["model"])
    return model


def state_from_checkpoint(payload: dict[str, Any]) -> TrainState:
    known = {f.name for f in dataclasses.fields(TrainState)}
    return TrainState(**{k: v for k, v in payload["state"].items() if k in known})
