"""Helpers to run a real coordinator in-process (tests, benchmarks, demos).

::

    coord = await start_coordinator(tmp_path, positions_per_shard=500)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(upload_requests([make_random_game(seed=1)]))
    await coord.stop()

:func:`start_coordinator` starts a coordinator on ``127.0.0.1:0`` in the running
event loop, with its data directory under ``tmp_path`` and one worker and one trainer
token already created. Validation runs in an in-process thread by default
(``validate_workers=-1``) so that tests start in milliseconds; pass
``validate_workers=1`` (or more) for the real spawn process pool. Any other
:class:`~kgrpc.coordinator.config.Config` field can be overridden by keyword.

Every uploaded game must name a task the coordinator issued (``require_task``). Tests of
the ingest's mechanics that upload made-up games store a task for them first::

    await coord.store_tasks_for(games)  # sets each game's task_id

which stores, in the coordinator's own task table, a task with each game's board size,
rules, komi and models and the coordinator's move cap (:func:`store_tasks` does the same
in a data directory before the coordinator starts, as ``kgrpc-bench ingest`` does).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import zstandard

from kgrpc.coordinator import auth, db
from kgrpc.coordinator.config import Config, config_from
from kgrpc.coordinator.server import CoordinatorApp
from kgrpc.coordinator.tasks import Tasks
from kgrpc.go.rules import Rules
from kgrpc.net import make_channel
from kgrpc.records.terms import TaskTerms, move_cap
from kgrpc.v1 import common_pb2, coordinator_pb2, records_pb2


def create_tokens(data_dir: str | Path, index: str = "") -> tuple[str, str]:
    """Create one worker and one trainer token in the index (``data_dir``'s by default)."""
    conn = db.connect(data_dir, index=index)
    try:
        worker, _ = auth.create_token(conn, "worker", "test worker")
        trainer, _ = auth.create_token(conn, "trainer", "test trainer")
    finally:
        conn.close()
    return worker, trainer


def terms_for_games(
    games: Iterable[records_pb2.GameRecord], cfg: Config | None = None, worker_id: str = ""
) -> list[TaskTerms]:
    """One task per kind of game in ``games`` (task id, board size, komi, rules, models),
    whose terms those games fit, with the move cap of a coordinator of ``cfg`` (default
    settings when None); each game without a task id gets its task's. ``worker_id`` "": any
    worker may play them."""
    cfg = cfg if cfg is not None else Config()
    made: dict[tuple[object, ...], TaskTerms] = {}
    for g in games:
        komi = g.komi if math.isfinite(g.komi) else 0.0
        try:
            rules = Rules.from_proto(g.rules).name or "chinese"
        except ValueError:
            rules = "chinese"  # refused as unsupported_rules before its task is looked at
        models = (
            (g.black_model,) if g.black_model == g.white_model else (g.black_model, g.white_model)
        )
        key = (g.task_id, g.board_size, komi, rules, models)
        if key not in made:
            made[key] = TaskTerms(
                g.task_id or "test-" + uuid.uuid4().hex[:16],
                g.board_size,
                rules,
                komi,
                komi,
                0.0,
                move_cap(g.board_size, cfg.max_moves, cfg.max_moves_per_point),
                models,
                worker_id,
            )
        g.task_id = made[key].task_id
    return list(made.values())


def store_tasks(data_dir: str | Path, terms: Iterable[TaskTerms]) -> None:
    """Store ``terms`` as issued tasks in ``data_dir``'s database (coordinator stopped)."""
    conn = db.connect(data_dir)
    try:
        tasks = Tasks(conn, config_from(None, {"data_dir": str(data_dir)}))
        for t in terms:
            tasks.store(t, "selfplay" if len(t.models) == 1 else "match")
    finally:
        conn.close()


def upload_request(
    games: Iterable[records_pb2.GameRecord], level: int = 3
) -> coordinator_pb2.UploadGamesRequest:
    """One UploadGamesRequest carrying ``games`` (zstd of a GameBatch)."""
    batch = records_pb2.GameBatch(games=list(games))
    data = zstandard.ZstdCompressor(level=level).compress(batch.SerializeToString())
    return coordinator_pb2.UploadGamesRequest(games_zstd=data, game_count=len(batch.games))


def upload_requests(
    games: list[records_pb2.GameRecord], per_message: int = 16
) -> list[coordinator_pb2.UploadGamesRequest]:
    """Requests for one UploadGames stream, ``per_message`` games each."""
    return [upload_request(games[i : i + per_message]) for i in range(0, len(games), per_message)]


@dataclass
class RunningCoordinator:
    address: str
    worker_token: str
    trainer_token: str
    data_dir: Path
    app: CoordinatorApp
    tls_ca: bytes | None = None

    def connect(self, *, readonly: bool = False) -> Any:
        """A connection to this coordinator's index (SQLite or PostgreSQL); close it."""
        return db.connect(self.data_dir, readonly=readonly, index=self.app.cfg.index)

    def channel(self, role: str | None = "worker", **kwargs: Any) -> grpc.aio.Channel:
        """A channel with the worker (default) or trainer token, or none (``role=None``)."""
        token = {"worker": self.worker_token, "trainer": self.trainer_token, None: None}[role]
        if self.tls_ca is not None:
            kwargs.setdefault("tls_ca", self.tls_ca)
            kwargs.setdefault("server_name", "localhost")
        return make_channel(self.address, token=token, **kwargs)

    async def store_tasks_for(
        self, games: Iterable[records_pb2.GameRecord], worker_id: str = ""
    ) -> list[TaskTerms]:
        """Store a task for ``games`` in this coordinator and name it in each game that has
        none (:func:`terms_for_games`); a game's own task id is stored as such."""
        games = list(games)
        terms = terms_for_games(games, self.app.cfg, worker_id)
        for t in terms:
            kind = "selfplay" if len(t.models) == 1 else "match"
            await self.app.db(self.app.tasks.store, t, kind)
        return terms

    async def stop(self, grace: float = 1.0) -> None:
        await self.app.stop(grace)


async def start_coordinator(tmp_path: str | Path, **config_overrides: Any) -> RunningCoordinator:
    """Start a coordinator in this event loop; ``await coord.stop()`` when done."""
    data_dir = Path(tmp_path) / "coordinator"
    overrides: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "data_dir": str(data_dir),
        "validate_workers": -1,
        "shutdown_grace_s": 1.0,
    }
    overrides.update(config_overrides)
    cfg = config_from(None, overrides)
    worker, trainer = create_tokens(cfg.data_dir, cfg.index)
    app = CoordinatorApp(cfg)
    await app.start()
    ca = Path(cfg.tls_cert).read_bytes() if cfg.tls_cert else None
    return RunningCoordinator(app.address, worker, trainer, Path(cfg.data_dir), app, ca)


def match_game(
    task: coordinator_pb2.Task,
    candidate_color: int,
    candidate_wins: bool,
    seed: int = 0,
    *,
    game_id: str | None = None,
) -> coordinator_pb2.MatchGame:
    """A gating game of match ``task`` with its record: random legal moves on the task's
    board, rules and komi, ended by the resignation of the side that loses (the candidate,
    playing ``candidate_color``, unless ``candidate_wins``). The coordinator replays it and
    accepts it: exactly what a volunteer who never ran the nets can send (docs/coordinator.md,
    "Workers and tokens"), so tests use it for honest and forged reports alike."""
    from kgrpc.randgame import make_random_game

    black, white = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
    if candidate_color not in (black, white):
        raise ValueError("candidate_color must be black or white")
    winner = candidate_color if candidate_wins else (white if candidate_color == black else black)
    # The player to move after the last move resigns: white resigns after an odd count.
    moves = 21 if winner == black else 20
    rules = Rules.from_proto(task.rules).name
    for attempt in range(100):
        rec = make_random_game(
            task.board_size,
            rules,
            task.komi,
            seed * 100 + attempt,
            max_moves=moves,
            game_id=game_id,
            task_id=task.task_id,
        )
        passed = task.board_size**2
        if len(rec.moves) == moves and not rec.moves[-1] == rec.moves[-2] == passed:
            break  # still going: the loser resigns here
    else:  # pragma: no cover - a random 9x9 game passes twice within 21 moves almost never
        raise RuntimeError("no random game of the length asked for")
    cand, ref = task.match.candidate_model, task.match.reference_model
    rec.black_model, rec.white_model = (cand, ref) if candidate_color == black else (ref, cand)
    rec.result.CopyFrom(
        records_pb2.GameResult(winner=winner, score=1.0 if winner == black else -1.0, resigned=True)
    )
    return coordinator_pb2.MatchGame(
        game_id=rec.game_id,
        candidate_color=candidate_color,
        winner=winner,
        score=rec.result.score,
        moves=len(rec.moves),
        record=rec,
    )
