"""The self-play window of ``kgrpc-bench selfplay``: games played for ``--seconds`` with the
search's counters read before and after, in-process or through an inference server.

:func:`_local` plays against :class:`inference.local.LocalEvaluator`, :func:`_remote` against
an inference server started as a subprocess on a free loopback port; both run
:func:`_selfplay` (the native game sets or the Python games, :func:`_engine`) and add the mean
batch size the evaluator saw.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


async def _selfplay(
    evaluator: Any, size: int, args: argparse.Namespace, model: str
) -> dict[str, float]:
    from kgrpc.go.rules import CHINESE
    from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
    from kgrpc.mcts.search import SearchStats
    from kgrpc.mcts.selfplay import GameSpec, play_selfplay_game

    cfg = SelfPlayConfig(
        search=SearchConfig(
            visits=args.visits,
            leaves_per_batch=args.leaves_per_batch,
            gumbel=bool(getattr(args, "gumbel", False)),
        ),
        full_search_prob=1.0,
        cheap_visits=args.visits,
    )
    spec = GameSpec(size, CHINESE, 7.5, cfg, model=model)
    stats = SearchStats()
    games = 0

    async def loop(i: int) -> None:
        nonlocal games
        seed = i
        while True:
            await play_selfplay_game(evaluator, spec, stats=stats, seed=seed)
            games += 1
            seed += 1000

    async def native_loop(i: int, per: int) -> None:
        # A game set per pipeline: one collects while the other's batch is evaluated.
        from kgrpc.mcts.gameset import NativeSelfPlay

        nonlocal games
        sp = NativeSelfPlay(
            evaluator,
            spec,
            stats=stats,
            seed=i,
            # No request above --max-batch: the batch the raw figures are measured at.
            max_rows=min(per * args.leaves_per_batch, args.max_batch),
            cache=cache,
        )
        while True:
            if sp.active < per:
                sp.add_games(per - sp.active)
            games += len(await sp.step())

    # One cache per process and model, as the worker keeps it (kgrpc.worker.runner).
    cache = None
    if _engine(args) == "native" and args.cache_positions > 0:
        from kgrpc.mcts.gameset import new_cache

        cache = new_cache(args.cache_positions)

    # Warm up (sessions, first batches), then measure a window.
    if _engine(args) == "native":
        pipes, per = _pipes(args)
        tasks = [asyncio.ensure_future(native_loop(i, per)) for i in range(pipes)]
    else:
        tasks = [asyncio.ensure_future(loop(i)) for i in range(args.parallel_games)]
    await asyncio.sleep(min(3.0, args.seconds / 4))
    v0, e0, r0, s0 = stats.visits, stats.nn_evals, stats.nn_requests, stats.searches
    h0 = stats.extra.get("cache_hits", 0)
    cpu0, t0 = os.times(), time.perf_counter()
    await asyncio.sleep(args.seconds)
    dt = time.perf_counter() - t0
    cpu1 = os.times()
    v1, e1, r1, s1 = stats.visits, stats.nn_evals, stats.nn_requests, stats.searches
    h1 = stats.extra.get("cache_hits", 0)
    root, reused = stats.root_visits, stats.reused_visits
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    visits_per_s = (v1 - v0) / dt
    # Too few searches of a 19x19 game finish inside a short window to count root visits in it,
    # so the reused share comes from every search finished since the start (warm-up included).
    share = reused / root if root else 0.0
    return {
        "visits_per_s": visits_per_s,
        "reused_share": share,
        # Root visits = new visits + reused ones, so new visits are (1 - share) of them.
        "root_visits_per_s": visits_per_s / (1.0 - share) if share < 1 else visits_per_s,
        "nn_evals_per_s": (e1 - e0) / dt,
        "cache_hits_per_s": (h1 - h0) / dt,
        "leaves_per_request": (e1 - e0) / max(1, r1 - r0),
        "games": games,
        # Searches begun per game during the window: all games start on an empty board at the
        # warm-up, so a small figure says the window saw openings only (their positions repeat
        # across games, which the evaluation cache answers).
        "searches_per_game": (s1 - s0) / args.parallel_games,
        "process_cpu_s_per_s": ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / dt,
    }


def _pipes(args: argparse.Namespace) -> tuple[int, int]:
    """Native search: game sets (one collects while another's batch is evaluated), games
    in each."""
    pipes = 2 if args.parallel_games >= 2 else 1
    return pipes, args.parallel_games // pipes


def _engine(args: argparse.Namespace) -> str:
    from kgrpc import native

    engine = getattr(args, "engine", "auto")
    if engine == "auto":
        return "native" if native.ENABLED else "python"
    if engine == "native" and not native.ENABLED:
        raise SystemExit(f"--engine native: {native.describe()}")
    return engine


async def _local(path: Path, size: int, args: argparse.Namespace) -> dict[str, float]:
    from inference.local import LocalEvaluator

    ev = LocalEvaluator(
        str(path),
        device=args.device,
        precision=args.precision,
        max_batch=args.max_batch,
        intra_threads=args.intra_threads,
    )
    await ev.start()
    try:
        out = await _selfplay(ev, size, args, "")
        out["mean_batch_size"] = float(ev.metrics.mean_batch_size)
        # The threads the session really runs with (ONNX Runtime's own record of them).
        (loaded,) = ev.registry.models.values()
        options = loaded.engine.session.get_session_options()
        out["intra_threads"] = float(options.intra_op_num_threads)
    finally:
        await ev.close()
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _remote(path: Path, size: int, args: argparse.Namespace) -> dict[str, float]:
    from inference.client import InferenceClient

    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inference",
            "--listen",
            f"127.0.0.1:{port}",
            "--model",
            str(path),
            "--device",
            args.device,
            "--precision",
            args.precision,
            "--max-batch",
            str(args.max_batch),
            "--intra-threads",
            str(args.intra_threads),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR"},
    )
    client = InferenceClient(f"127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                await asyncio.wait_for(client.model_info(), 2.0)
                break
            except Exception:
                if server.poll() is not None or time.monotonic() > deadline:
                    err = server.stderr.read().decode() if server.stderr else ""
                    raise RuntimeError(f"inference server did not start: {err[-1000:]}") from None
                await asyncio.sleep(0.3)
        out = await _selfplay(client, size, args, "")
        stats = await client.stats()
        out["mean_batch_size"] = float(stats.mean_batch_size)
    finally:
        await client.close()
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
    return out
