"""The models a ladder rates: from a directory, in training order, with their facts.

From a directory (``kgrpc-eval ladder --models DIR``), steps and rows are parsed from the name
``{series}-b{B}c{C}-s{steps}-d{rows}`` (:mod:`trainer.naming`); a coordinator's models come
from :mod:`kgrpc.programs.eval.remote` as the same :class:`Model`.

In a directory, a model's wall-clock time is its file's modification time and its self-play
game count is unknown, unless a sidecar ``NAME.json`` beside ``NAME.onnx`` gives them:
``{"created_unix": seconds, "selfplay_games": count, "run_start_unix": seconds}`` (each key
optional; wall-clock time counts from the earliest run start or model time, :func:`wall_origin`;
the cluster's final ladder writes one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Model:
    name: str
    path: Path
    steps: int | None
    rows: int | None
    created: float  # unix seconds
    selfplay_games: int | None
    run_start: float | None = None  # unix seconds; wall-clock time counts from here when known


def training_order(models: list[Model]) -> list[Model]:
    """Steps, rows (unknown first), then creation time and name."""
    return sorted(
        models,
        key=lambda m: (
            m.steps if m.steps is not None else -1,
            m.rows if m.rows is not None else -1,
            m.created,
            m.name,
        ),
    )


def discover_models(models_dir: Path) -> list[Model]:
    """The models of a directory in training order; times are the files' modification
    times, self-play game counts unknown."""
    from trainer.naming import parse_name

    if not models_dir.is_dir():
        raise ValueError(f"models directory {models_dir} does not exist")
    models = []
    for path in sorted(models_dir.glob("*.onnx")):
        name = path.stem
        try:
            parsed = parse_name(name)
            steps, rows = parsed.steps, parsed.rows
        except ValueError:
            steps = rows = None
        models.append(_with_sidecar(Model(name, path, steps, rows, path.stat().st_mtime, None)))
    if not models:
        raise ValueError(f"no .onnx models in {models_dir}")
    return training_order(models)


SIDECAR_KEYS = {"created_unix": float, "selfplay_games": int, "run_start_unix": float}


def _with_sidecar(model: Model) -> Model:
    """``model`` with the facts of its ``NAME.json`` sidecar, when there is one."""
    side = model.path.with_suffix(".json")
    if not side.exists():
        return model
    try:
        data = json.loads(side.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        facts = {k: cast(data[k]) for k, cast in SIDECAR_KEYS.items() if data.get(k) is not None}
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{side}: unreadable model facts ({exc})") from exc
    return replace(
        model,
        created=facts.get("created_unix", model.created),
        selfplay_games=facts.get("selfplay_games", model.selfplay_games),
        run_start=facts.get("run_start_unix", model.run_start),
    )


def wall_origin(models: list[Model]) -> float:
    """Unix time wall-clock figures count from: the earliest run start or model time."""
    return min([m.created for m in models] + [m.run_start for m in models if m.run_start])
