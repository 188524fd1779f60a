"""``kgrpc-bench inference``: raw ONNX Runtime vs in-process batcher vs the gRPC server.

One run, one model, four figures: (a) raw ORT evals/s at batch --max-batch (the ceiling);
(b) LocalEvaluator with --clients coroutines, one position each in flight; (c) the gRPC server
(a separate process, so the load generator does not share its GIL) with --clients coroutines
sending one position per request over --streams bidi streams; (d) the same with --batch
positions per request. Latency p50/p99 per request and mean batch size for each, plus how busy
the machine was (other processes' share of all CPUs during the run).

``--precision fp32,fp16,int8`` adds a side-by-side table first: raw ORT evals/s of each
precision's file (measured in interleaved rounds, so a change of machine load hits them alike)
and its parity with the fp32 file on held-out random-game positions (top-1, KL, value and score
MAE, within the export bounds or not), plus the parity recorded at export against torch when
the file has it. Sections (b)-(d) then use the first precision listed (``--raw-only`` skips
them). A missing variant of ``--model`` is converted from its fp32 file into a temporary folder;
a fresh model is exported in each precision. A fresh net's flat policy makes top-1 a coin toss:
``--fit-steps N`` first fits it to trainer/synthetic.py's teacher (confident policy, spread
values) so the parity figures resemble a trained net's.

This module is the program (flags, the run, the printed table); the measurements are in
:mod:`kgrpc.programs.bench.inference_load` and the precision table in
:mod:`kgrpc.programs.bench.inference_precisions`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from kgrpc.cli_help import env_flag
from kgrpc.programs.bench.inference_load import (
    Busyness,
    bench_grpc,
    bench_local,
    bench_raw,
    bench_sweep,
    start_server,
)
from kgrpc.programs.bench.inference_precisions import (
    _precision_list,
    _report_dict,
    compare_precisions,
    precision_figures,
    prepare_models,
    print_precisions,
)

HELP = "inference throughput: raw ONNX Runtime, in-process batcher, gRPC server (1 and K/request)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(parser, "--model", show="a fresh --arch net", help="ONNX model")
    env_flag(parser, "--arch", default="b6c96", help="net for a fresh model")
    env_flag(
        parser,
        "--board-size",
        type=int,
        default=0,
        show="0: the model's largest, 19 for a fresh one",
        help="board size",
    )
    env_flag(parser, "--clients", type=int, default=64, help="concurrent clients")
    env_flag(parser, "--batch", type=int, default=8, help="positions per request in (d)")
    env_flag(parser, "--seconds", type=float, default=5.0, help="seconds per measurement")
    env_flag(parser, "--max-batch", type=int, default=64, help="server/batcher max batch")
    env_flag(parser, "--max-delay-ms", type=float, default=2.0, help="batch delay")
    env_flag(
        parser,
        "--in-flight",
        type=int,
        default=0,
        help="batches run at once per model (0 = automatic: 2 on CUDA, 1 on CPU)",
    )
    env_flag(parser, "--streams", type=int, default=8, help="bidi streams of the client")
    env_flag(
        parser,
        "--device",
        default="auto",
        choices=["auto", "cuda", "cpu"],
        help="where the model runs",
    )
    env_flag(
        parser,
        "--precision",
        default="auto",
        help="auto, or precisions to compare side by side: fp32,fp16,int8",
    )
    env_flag(
        parser,
        "--raw-only",
        action="store_true",
        help="only the precision table (no batcher/server sections, no sweep)",
    )
    env_flag(
        parser,
        "--fit-steps",
        type=int,
        default=0,
        help="fit a fresh net this many steps to the synthetic teacher first",
    )
    env_flag(
        parser,
        "--parity-positions",
        type=int,
        default=128,
        help="held-out random-game positions for parity (as many more "
        "calibrate a converted int8 file)",
    )
    env_flag(
        parser,
        "--no-sweep",
        dest="sweep",
        action="store_false",
        help="skip the raw evals/s by batch size sweep",
    )
    env_flag(parser, "--json", metavar="FILE", help="also write the figures as JSON")


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="kgrpc-bench-inf-"))
    precisions = _precision_list(args.precision)
    path, n, _calibration, held_out = prepare_models(args, tmp, precisions)
    if precisions == ["auto"]:
        from inference.engine import Engine

        precisions = [Engine(path, device=args.device).precision]
    args.run_precision = precisions[0]

    proc = None if args.raw_only else start_server(args, path, tmp / "server.log")
    busy = Busyness([os.getpid()] + ([proc[0].pid] if proc else []))
    busy.start()
    try:
        table = compare_precisions(args, path, n, precisions, held_out)
        raw = (
            bench_raw(
                path, n, args.max_batch, args.seconds, args.device, precision=args.run_precision
            )
            if not args.raw_only
            else {}
        )
        sweep = (
            bench_sweep(path, n, args.max_batch, args.seconds, args.device, args.run_precision)
            if args.sweep and not args.raw_only
            else {}
        )
        if proc:
            addr = proc[1]
            local = asyncio.run(bench_local(args, path, n))
            grpc1 = asyncio.run(bench_grpc(args, addr, n, 1))
            grpck = asyncio.run(bench_grpc(args, addr, n, args.batch))
    finally:
        others = busy.stop()
        if proc:
            proc[0].terminate()
            try:
                proc[0].wait(15)
            except subprocess.TimeoutExpired:
                proc[0].kill()

    print(f"model {Path(path).name} board {n}x{n} cpus {os.cpu_count()}")
    print_precisions(table, n, args.max_batch)
    result: dict[str, Any] = {
        "board_size": n,
        "max_batch": args.max_batch,
        "other_processes_cpu_share": others,
        "precisions": [
            {
                **{
                    k: v
                    for k, v in r.items()
                    if k not in ("parity_vs_fp32_file", "parity_at_export")
                },
                "parity_vs_fp32_file": _report_dict(r["parity_vs_fp32_file"]),
                "parity_at_export": _report_dict(r["parity_at_export"]),
            }
            for r in table
        ],
        **precision_figures(table),
    }
    if args.raw_only:
        print(f"other processes used {others:.0%} of the CPUs during the run")
        return result
    rows = [
        (f"(a) raw ORT {args.run_precision}, batch {args.max_batch}", raw),
        ("(b) in-process batcher", local),
        ("(c) gRPC, 1 position/request", grpc1),
        (f"(d) gRPC, {args.batch} positions/request", grpck),
    ]
    print(f"clients {args.clients} provider {raw['provider']} precision {args.run_precision}")
    print(f"{'mode':36} {'evals/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'mean batch':>10}")
    for label, r in rows:
        print(
            f"{label:36} {r['evals_per_s']:9.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
            f"{r['mean_batch']:10.1f}"
        )
    if sweep:
        print(
            "raw ORT evals/s by batch size: " + "  ".join(f"{b}: {v:.0f}" for b, v in sweep.items())
        )
    ratio = grpc1["evals_per_s"] / raw["evals_per_s"]
    print(
        f"grpc/raw {ratio:.2f}   local/raw {local['evals_per_s'] / raw['evals_per_s']:.2f}   "
        f"other processes used {others:.0%} of the CPUs during the run"
    )
    result.update(
        {
            "raw_evals_per_s": raw["evals_per_s"],
            "local_evals_per_s": local["evals_per_s"],
            "grpc_evals_per_s": grpc1["evals_per_s"],
            "grpc_batched_evals_per_s": grpck["evals_per_s"],
            "grpc_over_raw": ratio,
            "mean_batch_size": grpc1["mean_batch"],
            "local_mean_batch_size": local["mean_batch"],
            "grpc_batched_mean_batch_size": grpck["mean_batch"],
            "latency_ms": {label: {"p50": r["p50_ms"], "p99": r["p99_ms"]} for label, r in rows},
            "clients": args.clients,
            "provider": raw["provider"],
            "precision": args.run_precision,
            "raw_by_batch": {str(b): v for b, v in sweep.items()},
        }
    )
    return result
