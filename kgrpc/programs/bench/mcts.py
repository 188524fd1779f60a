"""``kgrpc-bench mcts``: the search itself, with a free evaluator, on one core.

A "free-evaluator visit" is one descent, expansion and backup with an evaluator that returns
a uniform policy and value 0 without running a net, the Python round trip per batch included.
Self-play games (default settings: playout caps, noise, tree reuse, sensible root moves) run
for ``--seconds`` of CPU time per figure, with each implementation:

* native: :class:`kgrpc.mcts.gameset.NativeSelfPlay`, ``--games`` games in one game set, one
  ``collect``/``evaluate``/``apply`` round trip per batch, on the calling thread;
* python: ``--games`` concurrent :func:`kgrpc.mcts.selfplay.play_selfplay_game` tasks.

JSON keys: ``mcts_visits_per_s_9`` / ``mcts_visits_per_s_19`` (the implementation in use),
``mcts_visits_per_s_{9,19}_native``, ``mcts_visits_per_s_{9,19}_python``, and with
``--cache`` (native) ``mcts_cache_hit_share_{9,19}``: the share of leaves the evaluation
cache answered (they count as visits, as in KataGo, but cost no evaluation).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from kgrpc import native
from kgrpc.cli_help import env_flag
from kgrpc.evaluator import EvalResult
from kgrpc.go.rules import CHINESE
from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
from kgrpc.mcts.search import SearchStats

HELP = "MCTS visits/s with a free evaluator (uniform policy, value 0), native and Python"
TARGETS = {"mcts_visits_per_s_9": 100_000, "mcts_visits_per_s_19": 50_000}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(parser, "--seconds", type=float, default=5.0, help="CPU seconds per figure")
    env_flag(parser, "--visits", type=int, default=200, help="visits of a full search")
    env_flag(parser, "--games", type=int, default=64, help="games played at once")
    env_flag(parser, "--sizes", default="9,19", help="board sizes (comma-separated)")
    env_flag(
        parser,
        "--impl",
        default="native,python",
        help="implementations to measure (comma-separated: native, python)",
    )
    env_flag(
        parser, "--cache", type=int, default=0, help="native evaluation cache entries (0: no cache)"
    )
    env_flag(parser, "--json", metavar="FILE", help="also write the figures as JSON to FILE")


class FreeEvaluator:
    """Uniform policy, value 0, score 0: what the search costs without a net."""

    def __init__(self, size: int) -> None:
        self.nn = size * size
        self.evals = 0
        self.requests = 0
        self._policy = np.zeros((0, self.nn + 1), np.float32)

    async def evaluate(
        self,
        planes: np.ndarray,
        globals_: np.ndarray,
        *,
        model: str = "",
        want_ownership: bool = False,
    ) -> EvalResult:
        b = planes.shape[0]
        if self._policy.shape[0] < b:
            self._policy = np.full((b, self.nn + 1), 1.0 / (self.nn + 1), np.float32)
        self.evals += b
        self.requests += 1
        await asyncio.sleep(0)  # a real evaluator yields to the loop: let the other games run
        zeros = np.zeros(b, np.float32)
        return EvalResult(self._policy[:b], zeros, zeros)

    async def close(self) -> None:
        pass


def _config(visits: int) -> SelfPlayConfig:
    return SelfPlayConfig(search=SearchConfig(visits=visits), cheap_visits=max(1, visits // 4))


async def _native(size: int, args: argparse.Namespace) -> tuple[float, float]:
    from kgrpc.mcts.gameset import NativeSelfPlay, new_cache
    from kgrpc.mcts.selfplay import GameSpec

    cache = new_cache(args.cache) if args.cache else None
    rows = args.games * SearchConfig().leaves_per_batch
    sp = NativeSelfPlay(
        FreeEvaluator(size),
        GameSpec(size, CHINESE, 7.5, _config(args.visits)),
        cache=cache,
        seed=1,
        max_rows=rows,
        threaded=False,
    )
    start = time.process_time()
    while (elapsed := time.process_time() - start) < args.seconds:
        if sp.active < args.games:
            sp.add_games(args.games - sp.active)
        await sp.step()
    hits = sp.stats.extra.get("cache_hits", 0)
    leaves = sp.stats.nn_evals + hits
    return sp.stats.visits / elapsed, hits / leaves if leaves else 0.0


async def _python(size: int, args: argparse.Namespace) -> float:
    from kgrpc.mcts.selfplay import GameSpec, play_selfplay_game

    stats = SearchStats()
    ev = FreeEvaluator(size)
    spec = GameSpec(size, CHINESE, 7.5, _config(args.visits))

    async def games(k: int) -> None:
        seed = k
        while True:
            await play_selfplay_game(ev, spec, stats=stats, seed=seed)
            seed += args.games

    tasks = [asyncio.ensure_future(games(k)) for k in range(args.games)]
    start = time.process_time()
    while (elapsed := time.process_time() - start) < args.seconds:
        await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return stats.visits / elapsed


def run(args: argparse.Namespace) -> dict[str, Any]:
    impls = [x.strip() for x in args.impl.split(",") if x.strip()]
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    figures: dict[str, Any] = {}
    for size in sizes:
        if "native" in impls and native.ENABLED:
            rate, hit_share = asyncio.run(_native(size, args))
            figures[f"mcts_visits_per_s_{size}_native"] = round(rate, 1)
            if args.cache:
                figures[f"mcts_cache_hit_share_{size}"] = round(hit_share, 4)
        if "python" in impls:
            figures[f"mcts_visits_per_s_{size}_python"] = round(asyncio.run(_python(size, args)), 1)
        active = figures.get(f"mcts_visits_per_s_{size}_{native.IMPLEMENTATION}")
        if active is not None:
            figures[f"mcts_visits_per_s_{size}"] = active
    print(
        f"kgrpc-bench mcts (free evaluator, one core, CPU time; {native.describe()}; "
        f"{args.visits} visits per full search, {args.games} games at once, "
        f"cache {'off' if not args.cache else args.cache})"
    )
    print(f"{'figure':36s} {'value':>12s} {'target':>10s} {'ratio':>7s}")
    for key, value in figures.items():
        target = TARGETS.get(key) or TARGETS.get(key.rsplit("_", 1)[0])
        ratio = f"{value / target:6.2f}x" if target and "share" not in key else "      -"
        tstr = f"{target:,}" if target and "share" not in key else "-"
        print(f"{key:36s} {value:12,.1f} {tstr:>10s} {ratio}")
    return figures
