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
``clear()`` it when the model changes. With a cache, a position's random symmetry is drawn from
the position and the cache's salt, so a repeated position asks for the same symmetry and hits
(docs/native.md, "The search, exactly").

:class:`NativeMatch` plays gating games (two models) the same way, as
:func:`kgrpc.mcts.selfplay.play_match_game` plays them.

Needs the native core (``kgrpc.native.ENABLED``); the worker falls back to the Python games
otherwise.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from typing import Any

import numpy as np

from kgrpc import native
from kgrpc.go.features import NUM_GLOBALS, NUM_PLANES
from kgrpc.go.rules import Rules
from kgrpc.mcts.config import SelfPlayConfig
from kgrpc.mcts.search import Evaluator, SearchStats
from kgrpc.mcts.selfplay import GameSpec, PlayedGame
from kgrpc.records.build import RECORD_FORMAT_VERSION
from kgrpc.v1 import common_pb2, records_pb2

_COLOUR = {1: common_pb2.COLOR_BLACK, -1: common_pb2.COLOR_WHITE, 0: common_pb2.COLOR_UNSPECIFIED}


def native_config(
    config: SelfPlayConfig, board_size: int, *, match: bool = False
) -> dict[str, Any]:
    """The settings of ``kgrpc_native.GameSet`` for ``config`` on a board of that size;
    ``match``: the games of :func:`kgrpc.mcts.selfplay.play_match_game` instead (two models,
    every move a full search without noise, no resignation, no raw-policy openings)."""
    s = config.search
    if match:
        config = replace(
            config,
            full_search_prob=1.0,
            noise_fraction=0.0,
            resign_threshold=0.0,
            forced_playouts_k=0.0,
            opening_policy_prob=0.0,
        )
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
        "score_utility_factor": s.score_utility_factor,
        "score_utility_scale": s.utility_scale(board_size),
        "gumbel": s.gumbel,
        "gumbel_considered": s.gumbel_considered,
        "gumbel_c_visit": s.gumbel_c_visit,
        "gumbel_c_scale": s.gumbel_c_scale,
        "gumbel_scale": s.gumbel_scale,
        "forced_playouts_k": config.forced_playouts_k,
        "prune_policy_target": config.prune_policy_target,
        "opening_policy_prob": config.opening_policy_prob,
        "opening_moves": config.opening_moves(board_size),
        "opening_temperature": config.opening_temperature,
        "two_models": match,
    }


def new_cache(capacity: int = 100_000, salt: int | None = None) -> Any:
    """A bounded evaluation cache for :class:`NativeSelfPlay` (positions, not bytes); ``salt``
    picks each position's symmetry (random when None; tests fix it)."""
    if native.ext is None:
        raise RuntimeError(f"no native core: {native.describe()}")
    return native.ext.EvalCache(capacity, salt)


# Most positions a game set sends as one evaluation request (its buffers' rows). The worker
# keeps this default, so its requests, not its --max-batch, set the net batch: 32 games of
# learn9 gather about 155 leaves a step on average (docs/training.md, "The worker's net batch
# in the loop"); a bench cuts them to its own --max-batch.
MAX_ROWS = 512


class NativeSelfPlay:
    """Self-play games of one :class:`~kgrpc.mcts.selfplay.GameSpec` (model, size, rules,
    settings) on the native game set; each game has the spec's ``komi`` or its own
    (:meth:`add_games`)."""

    two_models = False

    def __init__(
        self,
        evaluator: Evaluator,
        spec: GameSpec,
        *,
        stats: SearchStats | None = None,
        cache: Any = None,
        seed: int | None = None,
        max_rows: int = MAX_ROWS,
        threaded: bool = True,
    ) -> None:
        if native.ext is None:
            raise RuntimeError(f"no native core: {native.describe()}")
        board_size, config = spec.board_size, spec.config
        self.evaluator = evaluator
        self.spec = spec
        self.board_size = board_size
        self.rules = spec.rules
        self.komi = float(spec.komi)
        self.config = config
        self.model = spec.model
        self.task_id = spec.task_id
        self.worker_id = spec.worker_id
        self.stats = stats if stats is not None else SearchStats()
        self.cache = cache
        self.threaded = threaded
        self.games = native.ext.GameSet(
            board_size,
            self.rules,
            self.komi,
            native_config(config, board_size, match=self.two_models),
            cache,
        )
        rows = max(int(max_rows), config.search.leaves_per_batch)
        n = board_size
        self.planes = np.zeros((rows, NUM_PLANES, n, n), dtype=bool)
        self.globals = np.zeros((rows, NUM_GLOBALS), dtype=np.float32)
        self.sides = np.zeros(rows, dtype=np.int8)
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
        sides = self.sides if self.two_models else None
        if self.threaded:
            rows = await asyncio.to_thread(self.games.collect, self.planes, self.globals, sides)
        else:
            rows = self.games.collect(self.planes, self.globals, sides)
        nn = self.board_size * self.board_size
        if rows:
            policy, value, score = await self._evaluate(rows)
        else:
            policy = np.zeros((0, nn + 1), dtype=np.float32)
            value = score = np.zeros(0, dtype=np.float32)
        if self.threaded and rows:
            finished = await asyncio.to_thread(self.games.apply, policy, value, score)
        else:
            finished = self.games.apply(policy, value, score)
        self._count()
        return [(int(f["id"]), self._played(f)) for f in finished]

    async def _evaluate(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(policy, value, score) of the first ``rows`` rows of the last collect."""
        return await self._evaluate_rows(
            self.evaluator, self.model, self.planes[:rows], self.globals[:rows]
        )

    async def _evaluate_rows(
        self, evaluator: Evaluator, model: str, planes: np.ndarray, globals_: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = planes.shape[0]
        nn = self.board_size * self.board_size
        if model:
            result = await evaluator.evaluate(planes, globals_, model=model)
        else:
            result = await evaluator.evaluate(planes, globals_)
        policy = np.ascontiguousarray(result.policy, dtype=np.float32)
        value = np.ascontiguousarray(result.value, dtype=np.float32)
        score = np.ascontiguousarray(result.score, dtype=np.float32)
        if policy.shape != (rows, nn + 1) or value.shape != (rows,) or score.shape != (rows,):
            raise ValueError(
                f"evaluator returned policy {policy.shape} / value {value.shape} "
                f"for {rows} positions of size {self.board_size}"
            )
        self.stats.nn_requests += 1
        return policy, value, score

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
        for key in ("visits", "nn_evals", "searches", "root_visits", "reused_visits"):
            setattr(self.stats, key, getattr(self.stats, key) + now[key] - self._seen[key])
        hits = now["cache_hits"] - self._seen["cache_hits"]
        if hits:
            self.stats.extra["cache_hits"] = self.stats.extra.get("cache_hits", 0) + hits
        self._seen = dict(now)

    def _played(self, f: dict[str, Any]) -> PlayedGame:
        black_name, white_name = self.spec.record_names(match=self.two_models)
        record = finished_record(
            f,
            self.rules,
            float(f.get("komi", self.komi)),
            self.board_size,
            model=black_name,
            white_model=white_name,
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
    white_model: str | None = None,
    task_id: str = "",
    worker_id: str = "",
    game_id: str | None = None,
) -> records_pb2.GameRecord:
    """The GameRecord of a game set's finished game (one dict of ``GameSet.apply``);
    ``model`` played black, and white too unless ``white_model`` names another."""
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
        white_model=model if white_model is None else white_model,
        moves=f["moves"].tolist(),
        targets=targets,
        result=result,
        worker_id=worker_id,
        task_id=task_id,
        finished_unix_ms=int(time.time() * 1000),
    )


class NativeMatch(NativeSelfPlay):
    """Gating-match games between two models on the native game set: the games of
    :func:`kgrpc.mcts.selfplay.play_match_game` (each colour searches its own tree with its
    own model at full visits, no noise, no resignation; the opening moves sampled with
    temperature), one ``collect``/``apply`` per batch for all games, each step evaluating
    black's rows with ``black`` (asking for the spec's ``model``) and white's with ``white``
    (asking for its ``white_model``), both requests at once; the records name the two as
    :meth:`~kgrpc.mcts.selfplay.GameSpec.record_names` says. No evaluation cache (it holds
    one model's answers)."""

    two_models = True

    def __init__(
        self,
        black: Evaluator,
        white: Evaluator,
        spec: GameSpec,
        *,
        stats: SearchStats | None = None,
        seed: int | None = None,
        max_rows: int = MAX_ROWS,
        threaded: bool = True,
    ) -> None:
        super().__init__(black, spec, stats=stats, seed=seed, max_rows=max_rows, threaded=threaded)
        self.white = white
        self.white_model = spec.white_model

    async def _evaluate(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nn = self.board_size * self.board_size
        policy = np.empty((rows, nn + 1), np.float32)
        value = np.empty(rows, np.float32)
        score = np.empty(rows, np.float32)
        sides = self.sides[:rows]
        models = ((self.evaluator, self.model), (self.white, self.white_model))

        async def side(which: int) -> None:
            idx = np.flatnonzero(sides == which)
            if idx.size == 0:
                return
            ev, model = models[which]
            p, v, s = await self._evaluate_rows(ev, model, self.planes[idx], self.globals[idx])
            policy[idx], value[idx], score[idx] = p, v, s

        await asyncio.gather(side(0), side(1))
        return policy, value, score
