"""What a worker plays next (GetTask): a chunk of a pending gating match, or self-play with
the best model, or "wait" before the first model. Runs on the storage thread."""

from __future__ import annotations

import uuid

from kgrpc.coordinator.config import Config
from kgrpc.coordinator.models import Models
from kgrpc.go.rules import preset_to_proto
from kgrpc.v1 import coordinator_pb2


def next_task(
    models: Models, cfg: Config, worker_id: str, may_play_matches: bool
) -> coordinator_pb2.Task:
    """The task for ``worker_id``. A match chunk goes only to a worker the caller may report
    for (``may_play_matches``: registered under its token); anyone else plays self-play,
    whose games are validated on upload anyway."""
    best = models.best()
    if best is None:
        return coordinator_pb2.Task(task_id="wait", retry_after_s=cfg.retry_after_s)
    stage = models.stage()
    task = coordinator_pb2.Task(
        rules=preset_to_proto(cfg.rules),
        komi=cfg.komi,
        board_size=stage.board_size,
        visits=stage.visits,
        max_moves=cfg.max_moves,  # longer games would be rejected as too_long
    )
    spec = models.next_match_task(worker_id) if may_play_matches else None
    if spec is not None:
        task.task_id = spec.task_id
        task.match.CopyFrom(
            coordinator_pb2.MatchTask(
                candidate_model=spec.candidate, reference_model=spec.reference, games=spec.games
            )
        )
    else:
        task.task_id = "selfplay-" + uuid.uuid4().hex[:12]
        task.selfplay.CopyFrom(
            coordinator_pb2.SelfPlayTask(model=best["name"], games=cfg.selfplay_task_games)
        )
    return task
