"""Self-play on the native game set: many games and their trees in C++, one evaluator call
per batch (docs/native.md).

:class:`NativeSelfPlay` plays the games :func:`kgrpc.mcts.selfplay.play_selfplay_game` plays
(same search, playout caps, noise, temperature, resignation, tree reuse), but instead of one
asyncio task and one small request per game, each step is one ``collect`` (every game descends
its tree; the new leaves' planes land in one preallocated array), one ``await
evaluator.evaluate(...)`` for all of them, and one ``apply`` (expand, back up, play the moves
whose search is complete). Finished games come back as :class:`PlayedGame` with a
``GameRecord`` as records.proto defines it.

The optional :class:`EvalCache` (``kgrpc_native.EvalCache``) answers repeated positions
(transpositions, common openings) without the evaluator; share one per process and model, and
``clear()`` it when the model changes.

Needs the native core (``kgrpc.native.ENABLED``); the worker falls back to the Python games
otherwise.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import numpy as np

from kgrpc import native
from kgrpc.go.features import NUM_GLOBALS, NUM_PLANES
from kgrpc.go.rules import Rules
from kgrpc.mcts.config import SelfPlayConfig
from kgrpc.mcts.search import Evaluator, SearchStats
from kgrpc.mcts.selfplay import PlayedGame
from kgrpc.records import RECORD_FORMAT_VERSION
from kgrpc.v1 import common_pb2, records_pb2

_COLOUR = {1: common_pb2.COLOR_BLACK, -1: common_pb2.COLOR_WHITE, 0: common_pb2.COLOR_UNSPECIFIED}


def native_config(config: SelfPlayConfig, board_size: int) -> dict[str, Any]:
    """The settings of ``kgrpc_native.GameSet`` for ``config`` on a board of that size."""
    s = config.search
    return {
        "visits": s.visits,
        "c_puct": s.c_puct,
        "fpu_reduction": s.fpu_reduction,
        "root_fpu_reduction": s.root_fpu_reduction,
        "leaves_per_batch": s.leaves_per_batch,
        "virtual_loss": s.virtual_loss,
        "random_symmetry": s.random_symmetry,
        "tree_reuse": s.tree_reuse,
        "sensible_root_moves": s.sensible_root_moves,
        "full_search_prob": config.full_search_prob,
        "cheap_visits": config.cheap_visits,
        "temperature_moves": config.temperature_moves(board_size),
        "temperature": config.temperature,
        "dirichlet_alpha_19": config.dirichlet_alpha_19,
        "noise_fraction": config.noise_fraction,
        "resign_threshold": config.resign_threshold,
        "resign_consecutive": config.resign_consecutive,
        "resign_playout_fraction": config.resign_playout_fraction,
        "max_moves": config.max_moves(board_size),
    }


def new_cache(capacity: int = 100_000) -> Any:
    """A bounded evaluation cache for :class:`NativeSelfPlay` (positions, not bytes)."""
    if native.ext is None:
        raise RuntimeError(f"no native core: {native.describe()}")
    return native.ext.EvalCache(capacity)


class NativeSelfPlay:
    """Self-play games of one model, size and rules on the native game set; each game has
    the set's ``komi`` or its own (:meth:`add_games`)."""

    def __init__(
        self,
        evaluator: Evaluator,
        board_size: int,
        rules: Rules,
        komi: float,
        config: SelfPlayConfig,
        *,
        model: str = "",
        model_name: str = "",
        task_id: str = "",
        worker_id: str = "",
        stats: SearchStats | None = None,
        cache: Any = None,
        seed: int | None = None,
        max_rows: int = 512,
        threaded: bool = True,
    ) -> None:
        if native.ext is None:
            raise RuntimeError(f"no native core: {native.describe()}")
        self.evaluator = evaluator
        self.board_size = board_size
        self.rules = rules
        self.komi = float(komi)
        self.config = config
        self.model = model
        self.model_name = model_name or model
        self.task_id = task_id
        self.worker_id = worker_id
        self.stats = stats if stats is not None else SearchStats()
        self.cache = cache
        self.threaded = threaded
        self.games = native.ext.GameSet(
            board_size, rules, self.komi, native_config(config, board_size), cache
        )
        rows = max(int(max_rows), config.search.leaves_per_batch)
        n = board_size
        self.planes = np.zeros((rows, NUM_PLANES, n, n), dtype=bool)
        self.globals = np.zeros((rows, NUM_GLOBALS), dtype=np.float32)
        self._rng = np.random.default_rng(seed)
        self._started: dict[int, float] = {}
        self._seen = dict(self.games.stats)

    @property
    def active(self) -> int:
        return int(self.games.active)

    def add_games(self, count: int, komi: float | None = None) -> list[int]:
        """Start ``count`` games (with ``komi``, else the set's); returns their ids (as
        :meth:`step_ids` reports them)."""
        ids = []
        for _ in range(count):
            seed = int(self._rng.integers(1 << 63))
            gid = self.games.add_game(seed, komi=None if komi is None else float(komi))
            self._started[gid] = time.monotonic()
            ids.append(gid)
        return ids

    async def step(self) -> list[PlayedGame]:
        """One batch: collect, evaluate, apply. Returns the games that finished."""
        return [game for _, game in await self.step_ids()]

    async def step_ids(self) -> list[tuple[int, PlayedGame]]:
        """:meth:`step`, with each finished game's id from :meth:`add_games`."""
        if self.threaded:
            rows = await asyncio.to_thread(self.games.collect, self.planes, self.globals)
        else:
            rows = self.games.collect(self.planes, self.globals)
        nn = self.board_size * self.board_size
        if rows:
            planes = self.planes[:rows]
            globals_ = self.globals[:rows]
            if self.model:
                result = await self.evaluator.evaluate(planes, globals_, model=self.model)
            else:
                result = await self.evaluator.evaluate(planes, globals_)
            policy = np.ascontiguousarray(result.policy, dtype=np.float32)
            value = np.ascontiguousarray(result.value, dtype=np.float32)
            score = np.ascontiguousarray(result.score, dtype=np.float32)
            if policy.shape != (rows, nn + 1) or value.shape != (rows,) or score.shape != (rows,):
                raise ValueError(
                    f"evaluator returned policy {policy.shape} / value {value.shape} "
                    f"for {rows} positions of size {self.board_size}"
                )
            self.stats.nn_requests += 1
        else:
            policy = np.zeros((0, nn + 1), dtype=np.float32)
            value = score = np.zeros(0, dtype=np.float32)
        if self.threaded and rows:
            finished = await asyncio.to_thread(self.games.apply, policy, value, score)
        else:
            finished = self.games.apply(policy, value, score)
        self._count()
        return [(int(f["id"]), self._played(f)) for f in finished]

    async def play(self, games: int, concurrent: int) -> list[PlayedGame]:
        """Play ``games`` games, ``concurrent`` at a time; returns them as they finished."""
        done: list[PlayedGame] = []
        started = 0
        while len(done) < games:
            want = min(concurrent - self.active, games - started)
            if want > 0:
                self.add_games(want)
                started += want
            done.extend(await self.step())
        return done

    def _count(self) -> None:
        now = self.games.stats
        for key, attr in (("visits", "visits"), ("nn_evals", "nn_evals"), ("searches", "searches")):
            setattr(self.stats, attr, getattr(self.stats, attr) + now[key] - self._seen[key])
        hits = now["cache_hits"] - self._seen["cache_hits"]
        if hits:
            self.stats.extra["cache_hits"] = self.stats.extra.get("cache_hits", 0) + hits
        self._seen = dict(now)

    def _played(self, f: dict[str, Any]) -> PlayedGame:
        record = finished_record(
            f,
            self.rules,
            float(f.get("komi", self.komi)),
            self.board_size,
            model=self.model_name,
            task_id=self.task_id,
            worker_id=self.worker_id,
        )
        started = self._started.pop(int(f["id"]), time.monotonic())
        return PlayedGame(
            record,
            would_resign=bool(f["would_resign"]),
            false_resignation=bool(f["false_resignation"]),
            seconds=time.monotonic() - started,
        )


def finished_record(
    f: dict[str, Any],
    rules: Rules,
    komi: float,
    board_size: int,
    *,
    model: str = "",
    task_id: str = "",
    worker_id: str = "",
    game_id: str | None = None,
) -> records_pb2.GameRecord:
    """The GameRecord of a game set's finished game (one dict of ``GameSet.apply``)."""
    offsets = f["policy_offsets"].tolist()
    pmoves = f["policy_moves"].tolist()
    pprobs = f["policy_probs"].tolist()
    full = f["full_search"].tolist()
    visits = f["visits"].tolist()
    played = f["played_visits"].tolist()
    values = f["root_value"].tolist()
    scores = f["root_score"].tolist()
    targets = [
        records_pb2.SearchTarget(
            full_search=full[i],
            visits=visits[i],
            played_visits=played[i],
            policy_moves=pmoves[offsets[i] : offsets[i + 1]],
            policy_probs=pprobs[offsets[i] : offsets[i + 1]],
            root_value=values[i],
            root_score=scores[i],
        )
        for i in range(len(visits))
    ]
    result = records_pb2.GameResult(
        winner=_COLOUR[int(f["winner"])],
        score=float(f["score"]),
        ownership=f["ownership"].tolist(),
        resigned=bool(f["resigned"]),
    )
    return records_pb2.GameRecord(
        game_id=game_id or str(uuid.uuid4()),
        rules=rules.to_proto(),
        komi=komi,
        board_size=board_size,
        format_version=RECORD_FORMAT_VERSION,
        black_model=model,
        white_model=model,
        moves=f["moves"].tolist(),
        targets=targets,
        result=result,
        worker_id=worker_id,
        task_id=task_id,
        finished_unix_ms=int(time.time() * 1000),
    )
