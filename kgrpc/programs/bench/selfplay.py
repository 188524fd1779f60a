"""``kgrpc-bench selfplay``: MCTS self-play throughput, in-process and through an inference
server, against the raw ONNX Runtime ceiling of the same model on the same machine.

``--precision int8`` (or fp16) plays with that file of the model (converted from the fp32 file
into a temporary folder when there is none beside it, int8 calibrated on random-game
positions) and reports, measured in the same run, the raw fp32 evals/s of the same model and
the ratio of self-play visits/s to it: issue 13's figure (target >= 1.77 for b6c96 19x19 with
int8 and the native search, 1.3x KataGo's own visits/s over its evals/s).

The raw figures are measured twice, just before and just after the self-play windows, and
the ratios divide by their mean (:class:`RawFigure`); both are printed and written
(``raw_fp32_evals_per_s_before``/``_after``, ``raw_drift``), and a run whose raw figures moved
by more than :data:`DRIFT_WARN` says that its ratios carry that much noise.

This module is the program (flags, the model file, the raw figures, the printed table); the
self-play windows are :mod:`kgrpc.programs.bench.selfplay_modes`.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.cli_help import env_flag
from kgrpc.programs.bench.selfplay_modes import _engine, _local, _remote
from kgrpc.schema import NUM_GLOBALS, NUM_PLANES

HELP = (
    "self-play MCTS throughput (visits/s, NN evals/s, mean batch) in-process and via a gRPC "
    "inference server, and the ratio to raw ONNX Runtime at the max batch"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    env_flag(p, "--model", show="a random b6c96 net, made on the spot", help="ONNX model")
    env_flag(
        p,
        "--board-size",
        type=int,
        default=0,
        show="0: the model's first board size, else 19",
        help="board size",
    )
    env_flag(p, "--parallel-games", type=int, default=16, help="games played at once")
    env_flag(p, "--visits", type=int, default=100, help="visits per move")
    env_flag(p, "--leaves-per-batch", type=int, default=8, help="leaves a game adds to a batch")
    env_flag(
        p,
        "--gumbel",
        action="store_true",
        help="self-play with the Gumbel root search (--visits simulations a move) instead of PUCT",
    )
    env_flag(
        p,
        "--max-batch",
        type=int,
        default=64,
        help="largest evaluation batch: the native game sets' requests are cut to it, unlike "
        "kgrpc-worker's, whose game set sends the leaves of all its games as one request",
    )
    env_flag(p, "--seconds", type=float, default=20.0, help="seconds per mode")
    env_flag(
        p,
        "--cache-positions",
        type=int,
        default=EVAL_CACHE_POSITIONS,
        help="native search: the worker's evaluation cache, in positions (0: off); a visit it "
        "answers counts as a visit, not as an NN eval, as KataGo counts them",
    )
    env_flag(p, "--modes", default="local,remote", help="comma-separated: local, remote")
    env_flag(
        p,
        "--engine",
        choices=("auto", "native", "python"),
        default="auto",
        help="search: the native game set (kgrpc.mcts.gameset) or the Python games "
        "(auto: native when the core is installed)",
    )
    env_flag(
        p,
        "--precision",
        default="fp32",
        choices=("fp32", "fp16", "int8"),
        help="the model file self-play runs (raw fp32 evals/s is measured too, for the ratio)",
    )
    env_flag(
        p,
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the net runs: the raw figures, the in-process evaluator and the inference "
        "server (scripts/gpu-check.sh passes cuda)",
    )
    env_flag(
        p,
        "--intra-threads",
        type=int,
        default=0,
        metavar="T",
        help="ONNX Runtime threads per session for the raw figures, the in-process evaluator "
        "and the inference server (0: one per core, the worker's default; the worker's "
        "--intra-threads)",
    )
    env_flag(p, "--json", metavar="FILE", help="also write the figures as JSON to FILE")


# The worker's default (kgrpc.worker.runner.EVAL_CACHE_POSITIONS; kept equal by a test).
EVAL_CACHE_POSITIONS = 100_000
# Self-play visits/s over raw fp32 evals/s of the same run, b6c96 19x19, native search: issue
# 12's target for the fp32 file (KataGo's own ratio) and issue 13's for the int8 file.
VISITS_OVER_RAW_FP32_TARGETS = {"fp32": (12, 1.36), "int8": (13, 1.77)}


# Seconds of each raw ONNX Runtime measurement (shorter when the self-play window is).
RAW_WINDOW_S = 4.0
# Above this relative change of a raw figure between before and after, the run says so.
DRIFT_WARN = 0.10


@dataclass(frozen=True)
class RawFigure:
    """Raw evals/s of one model file, measured just before and just after the self-play
    windows: their mean is the figure the self-play is divided by, so that a machine whose
    speed drifts during the run (turbo, neighbours on a shared host) biases the ratio less
    than a single measurement taken at one end would."""

    before: float
    after: float

    @property
    def mean(self) -> float:
        return (self.before + self.after) / 2

    @property
    def drift(self) -> float:
        """|after - before| relative to their mean."""
        return abs(self.after - self.before) / self.mean if self.mean else 0.0


def _variant(path: Path, precision: str, size: int, tmp: Path) -> Path:
    """The fp32 file of a release that has ``precision`` beside it: ``path`` itself, or a copy
    in ``tmp`` with the variant converted (never written beside the user's file)."""
    import shutil

    from kgrpc.precision import FP32, variant_path

    if precision == FP32 or variant_path(path, precision).is_file():
        return path
    from kgrpc.programs.bench.inference_precisions import convert_file
    from trainer.positions import draw_sets

    local = path if path.parent == tmp else tmp / path.name
    if local != path:
        shutil.copy(path, local)
    calibration, _ = draw_sets([size], 128)
    print(f"converting {path.name} to {precision} (calibrated on random-game positions) ...")
    convert_file(local, precision, calibration)
    return local


def _model(args: argparse.Namespace, tmp: Path) -> tuple[Path, int]:
    from trainer.export import init_model, read_metadata

    if args.model:
        path = Path(args.model)
        meta = read_metadata(path)
        sizes = [int(s) for s in meta.get("board_sizes", "19").split(",") if s]
    else:
        size = args.board_size or 19
        path = tmp / "kg-b6c96-s0-d0.onnx"
        print(f"making a random b6c96 {size}x{size} model in {path} ...", flush=True)
        init_model(size, blocks=6, channels=96, out=path)
        sizes = [size]
    return path, args.board_size or (sizes[0] if sizes else 19)


def raw_ceiling(
    path: Path,
    size: int,
    batch: int,
    seconds: float = 4.0,
    precision: str = "fp32",
    device: str = "cpu",
    intra_threads: int = 0,
) -> float:
    """Positions/s of the bare engine (same ORT session settings) at ``batch``, running the
    model's ``precision`` file on ``device`` with ``intra_threads`` (0: one per core)."""
    from inference.engine import Engine

    engine = Engine(str(path), device=device, precision=precision, intra_threads=intra_threads)
    rng = np.random.default_rng(0)
    x = (rng.random((batch, NUM_PLANES, size, size)) < 0.3).astype(np.float32)
    g = rng.uniform(-1, 1, (batch, NUM_GLOBALS)).astype(np.float32)
    engine.run_float(x, g)  # warm-up
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        engine.run_float(x, g)
        n += batch
    return n / (time.perf_counter() - t0)


def _cache_line(args: argparse.Namespace, results: dict[str, dict[str, float]]) -> str:
    if _engine(args) != "native":
        return "evaluation cache: none (Python search)"
    if args.cache_positions <= 0:
        return "evaluation cache: off"
    hits = ", ".join(f"{m} {r.get('cache_hits_per_s', 0.0):,.0f}/s" for m, r in results.items())
    return f"evaluation cache: {args.cache_positions:,} positions, hits {hits}"


def _busy_share(seconds: float = 1.0) -> float | None:
    """Share of the machine's CPU used by other processes just before the run."""
    try:
        import psutil
    except ImportError:
        return None
    me = psutil.Process()
    me.cpu_percent(None)
    total = psutil.cpu_percent(seconds)
    mine = me.cpu_percent(None) / (psutil.cpu_count() or 1)
    return max(0.0, total - mine) / 100.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.intra_threads < 0:
        raise SystemExit(
            f"--intra-threads must be >= 0 (0: one per core), got {args.intra_threads}"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path, size = _model(args, Path(tmp))
        path = _variant(path, args.precision, size, Path(tmp))
        busy = _busy_share()
        batch = args.max_batch
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        runners = {"local": _local, "remote": _remote}
        for mode in modes:
            if mode not in runners:
                raise SystemExit(f"unknown mode {mode!r} (local, remote)")
        precisions = ["fp32"] if args.precision == "fp32" else ["fp32", args.precision]
        window = min(RAW_WINDOW_S, args.seconds)
        threads = args.intra_threads
        before = {
            p: raw_ceiling(path, size, batch, window, p, args.device, threads) for p in precisions
        }
        results: dict[str, dict[str, float]] = {}
        for mode in modes:
            results[mode] = asyncio.run(runners[mode](path, size, args))
        after = {
            p: raw_ceiling(path, size, batch, window, p, args.device, threads) for p in precisions
        }
    raws = {p: RawFigure(before[p], after[p]) for p in precisions}
    raw_fp32, raw = raws["fp32"].mean, raws[args.precision].mean
    print(
        f"\nself-play, {size}x{size}, {args.parallel_games} games, {args.visits} visits, "
        f"{args.leaves_per_batch} leaves/request, max batch {batch}, "
        f"{_engine(args)} search, {args.precision} model, ONNX Runtime threads "
        f"{args.intra_threads or 'one per core'}"
    )
    print(_cache_line(args, results))
    if busy is not None:
        print(f"other processes used {busy:.0%} of the CPUs before the run")
    for p, r in raws.items():
        print(
            f"raw ONNX Runtime at batch {batch}, {p}: {r.mean:,.0f} evals/s "
            f"(mean of {r.before:,.0f} before and {r.after:,.0f} after the self-play"
            + (f"; {r.mean / raw_fp32:.2f}x fp32)" if p != "fp32" else ")")
        )
    drift = max(r.drift for r in raws.values())
    if drift > DRIFT_WARN:
        print(
            f"the raw figures moved by {drift:.0%} between before and after: the machine's "
            "speed changed during the run, and the ratios below carry that much noise"
        )
    print(
        f"{'mode':<8}{'visits/s':>10}{'evals/s':>10}{'batch':>8}{'evals/raw':>11}"
        f"{'visits/raw fp32':>16}{'games':>7}{'searches/game':>15}"
    )
    for mode, r in results.items():
        r["evals_over_raw"] = r["nn_evals_per_s"] / raw if raw else 0.0
        r["visits_over_raw_fp32"] = r["visits_per_s"] / raw_fp32 if raw_fp32 else 0.0
        r["root_visits_over_raw_fp32"] = r["root_visits_per_s"] / raw_fp32 if raw_fp32 else 0.0
        print(
            f"{mode:<8}{r['visits_per_s']:>10,.0f}{r['nn_evals_per_s']:>10,.0f}"
            f"{r['mean_batch_size']:>8.1f}{r['evals_over_raw']:>11.2f}"
            f"{r['visits_over_raw_fp32']:>16.2f}{int(r['games']):>7}"
            f"{r['searches_per_game']:>15.1f}"
        )
    print(
        f"searches/game: searches begun per game in the window; all {args.parallel_games} "
        "games began on an empty board at the warm-up, so a small figure means openings only"
    )
    main = results.get("local") or next(iter(results.values()))
    print(
        "visits/s counts new visits (KataGo's playouts); KataGo's \"visits\" of a search are "
        "its root's, the subtree reused from the previous move included (maxVisits). "
        f"{main['reused_share']:.0%} of the root visits of the searches finished in this run "
        f"were reused: {main['root_visits_per_s']:,.0f} root visits/s, "
        f"{main['root_visits_over_raw_fp32']:.2f}x raw fp32"
    )
    target = VISITS_OVER_RAW_FP32_TARGETS.get(args.precision)
    print(
        f"self-play visits/s / raw fp32 evals/s: {main['visits_over_raw_fp32']:.2f}"
        + (
            f" (issue {target[0]} target >= {target[1]} for b6c96 19x19, {args.precision}, "
            "native search; one run, same machine)"
            if target
            else " (one run, same machine)"
        )
    )
    return {
        "visits_per_s": main["visits_per_s"],
        "nn_evals_per_s": main["nn_evals_per_s"],
        "mean_batch_size": main["mean_batch_size"],
        "evals_over_raw": main["evals_over_raw"],
        "raw_evals_per_s": raw,
        "raw_fp32_evals_per_s": raw_fp32,
        "raw_fp32_evals_per_s_before": raws["fp32"].before,
        "raw_fp32_evals_per_s_after": raws["fp32"].after,
        "raw_drift": drift,
        "raw_batch": batch,
        "cache_positions": args.cache_positions if _engine(args) == "native" else 0,
        "cache_hits_per_s": main.get("cache_hits_per_s", 0.0),
        "searches_per_game": main["searches_per_game"],
        "visits_over_raw_fp32": main["visits_over_raw_fp32"],
        "reused_share": main["reused_share"],
        "root_visits_per_s": main["root_visits_per_s"],
        "root_visits_over_raw_fp32": main["root_visits_over_raw_fp32"],
        "precision": args.precision,
        "search": "gumbel" if getattr(args, "gumbel", False) else "puct",
        "board_size": size,
        "device": args.device,
        "intra_threads": args.intra_threads,
        "engine": _engine(args),
        "other_cpu_share": busy,
        "modes": results,
    }
