"""``kgrpc-bench ingest``: games/s the coordinator accepts with full validation.

Random legal games (kgrpc.randgame; ~250 moves at 19x19) are generated before the
clock starts; a coordinator runs as a subprocess (spawn validation pool, default
size = cores); U uploaders stream the games concurrently. Every game names a task (one per
:data:`GAMES_PER_TASK` games, as a worker's self-play tasks do), stored in the coordinator's
task table before it starts: ingest looks each one up and checks the game against it, as it
does in production (``require_task``). Figures: accepted games/s
and positions (training rows)/s, the coordinator's peak RSS (main process, and with
its validation processes), and CPU use: the coordinator's (with its pool), this process's
(the uploaders, on the same machine as the coordinator here), and other processes'; and,
outside the clock, the journal payload of a game (its rows encoded, and as stored).

With ``--impl native,python`` (the default when the native core is installed) the same games
go to two coordinators in turn, one replaying with the native core and one with
``KGRPC_NATIVE=0``: ``games_per_s_native`` and ``games_per_s_python`` side by side, and
``games_per_s`` etc. for the implementation in use.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kgrpc.cli_help import env_flag

HELP = "games/s accepted by the coordinator with full validation, from concurrent uploaders"
TARGET_GAMES_PER_S = 500.0
GAMES_PER_TASK = 25  # the coordinator's default selfplay_task_games


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(
        parser,
        "--games",
        type=int,
        default=300,
        help="legal games generated (before the clock starts) and uploaded",
    )
    env_flag(parser, "--board-size", type=int, default=19, help="board size")
    env_flag(parser, "--moves", type=int, default=250, help="move cap of the generated games")
    env_flag(parser, "--uploaders", type=int, default=4, help="concurrent uploading clients")
    env_flag(parser, "--per-message", type=int, default=10, help="games per upload message")
    env_flag(
        parser,
        "--full-search-prob",
        type=float,
        default=0.25,
        help="share of moves recorded as training rows",
    )
    env_flag(
        parser,
        "--validate-workers",
        type=int,
        default=0,
        help="validation processes of the coordinator (0 = one per core)",
    )
    env_flag(
        parser,
        "--impl",
        default="native,python",
        help="coordinator replay implementations (comma-separated: native, "
        "python); native is skipped when the core is not installed",
    )
    env_flag(
        parser,
        "--sgf-share",
        type=float,
        default=1.0,
        help="share of games the coordinator keeps as SGF (1.0 = all, the coordinator's "
        "default; 0 = none)",
    )
    env_flag(parser, "--json", metavar="FILE", help="also write the figures as JSON to FILE")


def _games(args: argparse.Namespace) -> list:
    from kgrpc.randgame import make_random_game
    from kgrpc.records import move_cap

    t0 = time.perf_counter()
    # The coordinator runs with --max-moves args.moves: a game not ended by passes must stop
    # at exactly its cap on this board (records.move_cap), or it is rejected as unfinished.
    cap = move_cap(args.board_size, args.moves)
    games = [
        make_random_game(
            args.board_size, seed=i, max_moves=cap, full_search_prob=args.full_search_prob
        )
        for i in range(args.games)
    ]
    for i, g in enumerate(games):
        g.task_id = f"selfplay-bench-{i // GAMES_PER_TASK:05d}"
    avg = sum(len(g.moves) for g in games) / len(games)
    print(f"generated {len(games)} games ({avg:.0f} moves avg) in {time.perf_counter() - t0:.1f} s")
    return games


async def _run(args: argparse.Namespace, games: list, impl: str) -> dict[str, Any]:
    import psutil

    from kgrpc.coordinator.config import Config
    from kgrpc.coordinator.testing import (
        create_tokens,
        store_tasks,
        terms_for_games,
        upload_request,
    )
    from kgrpc.net import make_channel
    from kgrpc.v1 import coordinator_pb2_grpc

    step = args.per_message
    requests = [upload_request(games[i : i + step]) for i in range(0, len(games), step)]
    env = dict(os.environ)
    if impl == "python":
        env["KGRPC_NATIVE"] = "0"
    else:
        env.pop("KGRPC_NATIVE", None)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        worker_token, _ = create_tokens(data_dir)
        # The tasks the games name, with the cap of a coordinator run with --max-moves.
        store_tasks(data_dir, terms_for_games(games, Config(max_moves=args.moves)))
        port_file = data_dir / "coordinator.port"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kgrpc.coordinator",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                str(data_dir),
                "--validate-workers",
                str(args.validate_workers),
                "--log-level",
                "WARNING",
                "--max-moves",
                str(args.moves),
                "--sgf-share",
                str(args.sgf_share),
            ],
            env=env,
        )
        try:
            while not port_file.exists():
                if proc.poll() is not None:
                    raise RuntimeError("coordinator exited during start-up")
                await asyncio.sleep(0.05)
            address = port_file.read_text().strip()
            ps = psutil.Process(proc.pid)
            peak_main = peak_total = 0.0
            stop = asyncio.Event()

            async def sample() -> None:
                nonlocal peak_main, peak_total
                while not stop.is_set():
                    try:
                        main = ps.memory_info().rss
                        total = main + sum(c.memory_info().rss for c in ps.children(recursive=True))
                    except psutil.Error:
                        break
                    peak_main, peak_total = max(peak_main, main), max(peak_total, total)
                    await asyncio.sleep(0.1)

            totals = {"accepted": 0, "rejected": 0, "duplicates": 0}

            async def uploader(mine: list) -> None:
                async with make_channel(address, token=worker_token) as ch:
                    stub = coordinator_pb2_grpc.CoordinatorStub(ch)
                    for req in mine:
                        resp = await stub.UploadGames(iter([req]), timeout=600)
                        totals["accepted"] += resp.accepted
                        totals["rejected"] += resp.rejected
                        totals["duplicates"] += resp.duplicates

            sampler = asyncio.ensure_future(sample())
            psutil.cpu_percent(percpu=False)
            mine_cpu0 = sum(
                p.cpu_times().user + p.cpu_times().system
                for p in [ps, *ps.children(recursive=True)]
            )
            own0 = psutil.Process().cpu_times()
            start = time.perf_counter()
            await asyncio.gather(
                *(uploader(requests[k :: args.uploaders]) for k in range(args.uploaders))
            )
            elapsed = time.perf_counter() - start
            machine = psutil.cpu_percent(percpu=False) / 100 * (os.cpu_count() or 1)
            coord_cpu = (
                sum(
                    p.cpu_times().user + p.cpu_times().system
                    for p in [ps, *ps.children(recursive=True)]
                )
                - mine_cpu0
            )
            own1 = psutil.Process().cpu_times()
            own_cpu = (own1.user + own1.system) - (own0.user + own0.system)
            stop.set()
            await sampler
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    positions = sum(sum(1 for t in g.targets if t.full_search) for g in games)
    others = max(0.0, machine - (coord_cpu + own_cpu) / elapsed)
    result = {
        "implementation": impl,
        "games": args.games,
        "board_size": args.board_size,
        "uploaders": args.uploaders,
        "seconds": round(elapsed, 3),
        "games_per_s": round(totals["accepted"] / elapsed, 2),
        "positions_per_s": round(positions / elapsed * totals["accepted"] / max(1, len(games)), 1),
        "accepted": totals["accepted"],
        "rejected": totals["rejected"],
        "peak_rss_mb": round(peak_main / 2**20, 1),
        "peak_rss_with_pool_mb": round(peak_total / 2**20, 1),
        "coordinator_cpu_cores": round(coord_cpu / elapsed, 2),
        "uploaders_cpu_cores": round(own_cpu / elapsed, 2),
        "other_processes_cpu_cores": round(others, 2),
        "target_games_per_s": TARGET_GAMES_PER_S,
        "ratio_to_target": round(totals["accepted"] / elapsed / TARGET_GAMES_PER_S, 3),
    }
    print(f"coordinator replay: {impl}")
    print(f"{'figure':<28}{'value':>12}")
    for k in (
        "games_per_s",
        "positions_per_s",
        "accepted",
        "rejected",
        "seconds",
        "peak_rss_mb",
        "peak_rss_with_pool_mb",
        "coordinator_cpu_cores",
        "uploaders_cpu_cores",
        "other_processes_cpu_cores",
    ):
        print(f"{k:<28}{result[k]:>12}")
    print(
        f"target {TARGET_GAMES_PER_S:.0f} games/s of {args.board_size}x{args.board_size}: ratio "
        f"{result['ratio_to_target']:.2f}"
    )
    return result


def _journal_kb(games: list, max_moves: int, sample: int = 50) -> tuple[float, float]:
    """Mean journal payload of the first ``sample`` games, in KB: encoded rows and as the
    validation pool stores them (compressed), measured outside the clock."""
    from kgrpc.coordinator import journal
    from kgrpc.coordinator.validate import ValidationSettings, validate_record_bytes

    # The coordinator's settings in this benchmark (--max-moves), without its task table.
    settings = ValidationSettings(max_moves=max_moves, require_task=False)
    raw = packed = n = 0
    for g in games[:sample]:
        out = validate_record_bytes(g.SerializeToString(), "bench", settings)
        if out.ok:
            raw += len(journal.encode_payload(out.row_arrays()))
            packed += len(out.payload)
            n += 1
    return (round(raw / n / 1024, 1), round(packed / n / 1024, 1)) if n else (0.0, 0.0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kgrpc import native

    impls = [x.strip() for x in args.impl.split(",") if x.strip()]
    if not native.ENABLED:
        impls = [x for x in impls if x != "native"]
    if not impls:
        raise SystemExit("kgrpc-bench ingest: no implementation to measure")
    games = _games(args)
    runs = {impl: asyncio.run(_run(args, games, impl)) for impl in impls}
    # The figures of the implementation in use stay under their plain keys.
    result = dict(runs.get(native.IMPLEMENTATION) or runs[impls[0]])
    for impl, figures in runs.items():
        for key in (
            "games_per_s",
            "positions_per_s",
            "coordinator_cpu_cores",
            "uploaders_cpu_cores",
            "other_processes_cpu_cores",
        ):
            result[f"{key}_{impl}"] = figures[key]
    if len(runs) > 1:
        print(
            "side by side: "
            + ", ".join(f"{impl} {f['games_per_s']} games/s" for impl, f in runs.items())
        )
    raw_kb, stored_kb = _journal_kb(games, args.moves)
    result["journal_payload_kb"], result["journal_payload_stored_kb"] = raw_kb, stored_kb
    print(
        f"journal payload per game: {result['journal_payload_kb']} KB of rows, "
        f"{result['journal_payload_stored_kb']} KB as stored (compressed)"
    )
    return result
