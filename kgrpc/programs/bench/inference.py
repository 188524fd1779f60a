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
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.cli_help import env_flag
from kgrpc.schema import NUM_GLOBALS, NUM_PLANES

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


class Busyness:
    """Other processes' CPU use, as a share of all CPUs, between start() and stop()."""

    def __init__(self, ours: list[int]) -> None:
        import psutil

        self.psutil = psutil
        self.ours = ours

    def _ours_cpu(self) -> float:
        total = 0.0
        for pid in self.ours:
            try:
                t = self.psutil.Process(pid).cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except self.psutil.Error:
                pass
        return total

    def start(self) -> None:
        t = self.psutil.cpu_times()
        self.t0 = time.monotonic()
        self.busy0 = t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0)
        self.ours0 = self._ours_cpu()

    def stop(self) -> float:
        t = self.psutil.cpu_times()
        busy = t.user + t.system + t.nice + getattr(t, "irq", 0) + getattr(t, "softirq", 0)
        wall = (time.monotonic() - self.t0) * (os.cpu_count() or 1)
        others = (busy - self.busy0) - (self._ours_cpu() - self.ours0)
        return max(0.0, others / wall) if wall > 0 else 0.0


def _positions(count: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    planes = rng.random((count, NUM_PLANES, n, n)) < 0.25
    planes[:, 0] = True
    return planes, rng.uniform(-0.5, 0.5, (count, NUM_GLOBALS)).astype(np.float32)


def _pcts(lat: list[float]) -> tuple[float, float]:
    if not lat:
        return 0.0, 0.0
    a = np.asarray(lat) * 1000.0
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def bench_raw(
    path: str,
    n: int,
    batch: int,
    seconds: float,
    device: str,
    engine: Any = None,
    precision: str = "auto",
) -> dict[str, float]:
    from inference.engine import Engine
    from inference.wire import pack_planes

    eng = engine or Engine(path, device=device, precision=precision)
    planes, g = _positions(batch, n, 1)
    packed = pack_planes(planes)
    eng.run(n, packed, g)  # warm-up
    lat: list[float] = []
    t_end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < t_end:
        t = time.perf_counter()
        eng.run(n, packed, g)
        lat.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - t0
    p50, p99 = _pcts(lat)
    return {
        "evals_per_s": len(lat) * batch / elapsed,
        "p50_ms": p50,
        "p99_ms": p99,
        "mean_batch": float(batch),
        "provider": eng.provider,  # type: ignore[dict-item]
        "precision": eng.precision,
    }  # type: ignore[dict-item]


async def _drive(
    evaluate,
    clients: int,
    per_req: int,
    n: int,
    seconds: float,  # type: ignore[no-untyped-def]
) -> tuple[float, list[float]]:
    planes, g = _positions(256, n, 2)
    lat: list[float] = []
    done = 0
    stop = time.perf_counter() + seconds

    async def client(i: int) -> None:
        nonlocal done
        j = i
        while time.perf_counter() < stop:
            k = (j * per_req) % (256 - per_req)
            t = time.perf_counter()
            await evaluate(planes[k : k + per_req], g[k : k + per_req])
            lat.append(time.perf_counter() - t)
            done += per_req
            j += 1

    # Warm-up so session start and stream setup are not measured.
    await asyncio.gather(*[evaluate(planes[:per_req], g[:per_req]) for _ in range(4)])
    t0 = time.perf_counter()
    await asyncio.gather(*[client(i) for i in range(clients)])
    return done / (time.perf_counter() - t0), lat


async def bench_local(args: argparse.Namespace, path: str, n: int) -> dict[str, float]:
    from inference.local import LocalEvaluator

    ev = LocalEvaluator(
        path,
        device=args.device,
        precision=args.run_precision,
        max_batch=args.max_batch,
        max_delay_ms=args.max_delay_ms,
        in_flight=args.in_flight,
    )
    await ev.start()
    m = ev.metrics
    b0, p0 = m.batches, m.batched_positions
    rate, lat = await _drive(ev.evaluate, args.clients, 1, n, args.seconds)
    mean_batch = (m.batched_positions - p0) / max(1, m.batches - b0)
    await ev.close()
    p50, p99 = _pcts(lat)
    return {"evals_per_s": rate, "p50_ms": p50, "p99_ms": p99, "mean_batch": mean_batch}


def start_server(
    args: argparse.Namespace, path: str, log_path: Path
) -> tuple[subprocess.Popen[bytes], str]:
    cmd = [
        sys.executable,
        "-m",
        "inference",
        "--listen",
        "127.0.0.1:0",
        "--model",
        path,
        "--device",
        args.device,
        "--precision",
        args.run_precision,
        "--max-batch",
        str(args.max_batch),
        "--max-delay-ms",
        str(args.max_delay_ms),
        "--in-flight",
        str(args.in_flight),
        "--log-every-s",
        "0",
        "--max-queue",
        str(max(8192, args.clients * args.batch * 2)),
    ]
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "GRPC_VERBOSITY": "ERROR"}
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(rb"listening on (\S+:\d+)", log_path.read_bytes())
        if m:
            return proc, m.group(1).decode()
        if proc.poll() is not None:
            raise RuntimeError(f"inference server exited: {log_path.read_text()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("inference server did not start within 60 s")


async def bench_grpc(args: argparse.Namespace, addr: str, n: int, per_req: int) -> dict[str, float]:
    from inference.client import InferenceClient

    client = InferenceClient(addr, streams=args.streams)

    async def evaluate(p: np.ndarray, g: np.ndarray) -> Any:
        return await client.evaluate(p, g)

    await evaluate(*_positions(per_req, n, 3))
    s0 = await client.stats()
    rate, lat = await _drive(evaluate, args.clients, per_req, n, args.seconds)
    s1 = await client.stats()
    await client.close()
    batches = max(1, s1.batches - s0.batches)
    # positions counted by the server include the warm-up calls of _drive (4 requests).
    mean_batch = (s1.positions - s0.positions) / batches
    p50, p99 = _pcts(lat)
    return {"evals_per_s": rate, "p50_ms": p50, "p99_ms": p99, "mean_batch": mean_batch}


def _precision_list(text: str) -> list[str]:
    from kgrpc.precision import AUTO, parse_precisions

    return [AUTO] if text.strip() == AUTO else parse_precisions(text)


def prepare_models(
    args: argparse.Namespace, tmp: Path, precisions: list[str]
) -> tuple[str, int, list[Any], list[Any]]:
    """(fp32 path with every listed variant beside it, board size, calibration, held out)."""
    import shutil

    from kgrpc.precision import AUTO, FP32, variant_path
    from trainer.positions import draw_sets

    wanted = [p for p in dict.fromkeys([FP32, *precisions]) if p != AUTO]
    n = args.board_size
    if not args.model:
        from trainer.export import default_name, export_precisions, fresh_model
        from trainer.model import parse_arch
        from trainer.parity import ParityBounds

        blocks, channels = parse_arch(args.arch)
        n = n or 19
        model = fresh_model(n, blocks, channels)
        if args.fit_steps:
            from trainer.synthetic import fit_teacher

            t0 = time.perf_counter()
            losses = fit_teacher(model, args.fit_steps, board_sizes=[min(n, 9)])
            print(
                f"fitted the fresh net to the synthetic teacher: {args.fit_steps} steps in "
                f"{time.perf_counter() - t0:.0f} s, loss {losses['loss']:.3f}"
            )
        sets = draw_sets([n], args.parity_positions)
        path = tmp / f"{default_name(blocks, channels)}.onnx"
        anything = ParityBounds(0.0, float("inf"), float("inf"), float("inf"))
        export_precisions(
            model,
            path,
            wanted,
            name=path.stem,
            board_sizes=[n],
            sets=sets,
            bounds=anything,
            atol=float("inf"),
        )
        return str(path), n, *sets
    path = Path(args.model)
    if not n:
        from inference.engine import Engine

        sizes = Engine(path, device="cpu", precision=FP32).info.metadata.get("board_sizes", "19")
        n = max(int(x) for x in sizes.split(","))
    sets = draw_sets([n], args.parity_positions)
    missing = [p for p in wanted if not variant_path(path, p).is_file()]
    if missing:
        # Never write beside the user's file: convert into the temporary folder.
        local = tmp / path.name
        for p in wanted:
            if p not in missing:
                shutil.copy(variant_path(path, p), variant_path(local, p))
        for p in missing:
            convert_file(variant_path(local, FP32), p, sets[0])
            print(
                f"{p}: no {variant_path(path, p).name} beside {path}; converted one from the "
                f"fp32 file (parity below is against that file)"
            )
        path = local
    return str(path), n, *sets


def convert_file(fp32_path: Path, precision: str, calibration: list[Any]) -> Path:
    """Write the ``precision`` variant of an fp32 model file beside it (metadata copied)."""
    import onnx

    from kgrpc.durable import atomic_write_bytes
    from kgrpc.precision import variant_path
    from kgrpc.schema import (
        MODEL_CALIBRATION_KEY,
        MODEL_META_PREFIX,
        MODEL_PARITY_PREFIX,
        MODEL_PRECISION_KEY,
    )
    from trainer.export import convert
    from trainer.positions import describe

    proto = convert(onnx.load(str(fp32_path)), precision, calibration)
    meta = {
        e.key: e.value
        for e in proto.metadata_props
        if not e.key.startswith(MODEL_META_PREFIX + MODEL_PARITY_PREFIX)
    }
    meta[MODEL_META_PREFIX + MODEL_PRECISION_KEY] = precision
    meta[MODEL_META_PREFIX + MODEL_CALIBRATION_KEY] = describe(calibration)
    del proto.metadata_props[:]
    for k, v in meta.items():
        proto.metadata_props.add(key=k, value=v)
    out = variant_path(fp32_path, precision)
    atomic_write_bytes(out, proto.SerializeToString())
    return out


def compare_precisions(
    args: argparse.Namespace, path: str, n: int, precisions: list[str], held_out: list[Any]
) -> list[dict[str, Any]]:
    """Raw evals/s per precision (interleaved rounds, median) and parity with the fp32 file."""
    from inference.engine import Engine
    from kgrpc.precision import FP32
    from kgrpc.schema import MODEL_PARITY_PREFIX
    from trainer.parity import ParityBounds, ParityReport, compare

    engines = {p: Engine(path, device=args.device, precision=p) for p in precisions}
    rounds = 4
    rates: dict[str, list[float]] = {p: [] for p in precisions}
    for _ in range(rounds):
        for p, eng in engines.items():
            r = bench_raw(path, n, args.max_batch, args.seconds / rounds, args.device, engine=eng)
            rates[p].append(r["evals_per_s"])
    # Parity on each engine's own provider (CUDA for fp16 on a GPU), against fp32 on its own.
    ref_engine = engines.get(FP32) or Engine(path, device=args.device, precision=FP32)
    refs = _engine_outputs(ref_engine, held_out)
    bounds = ParityBounds()
    rows = []
    for p, eng in engines.items():
        report = compare(p, refs, _engine_outputs(eng, held_out))
        recorded = ParityReport.from_metadata(eng.info.metadata, MODEL_PARITY_PREFIX, p)
        rows.append(
            {
                "precision": eng.precision,
                "provider": eng.provider,
                "evals_per_s": float(np.median(rates[p])),
                "rounds": rates[p],
                "file_bytes": Path(eng.path).stat().st_size,
                "parity_vs_fp32_file": report,
                "within_bounds": not report.violations(bounds),
                "parity_at_export": recorded,
            }
        )
    return rows


def _engine_outputs(engine: Any, sets: list[Any], chunk: int = 64) -> list[list[np.ndarray]]:
    out = []
    for s in sets:
        parts = [
            engine.run_outputs(s.planes[i : i + chunk], s.globals[i : i + chunk])
            for i in range(0, len(s), chunk)
        ]
        out.append([np.concatenate([part[k] for part in parts]) for k in range(4)])
    return out


def print_precisions(rows: list[dict[str, Any]], n: int, batch: int) -> None:
    base = next(
        (r["evals_per_s"] for r in rows if r["precision"] == "fp32"), rows[0]["evals_per_s"]
    )
    print(
        f"precisions, raw ORT at batch {batch}, board {n}x{n}; parity vs the fp32 file on "
        f"{rows[0]['parity_vs_fp32_file'].positions} held-out random-game positions, each "
        "on its own provider"
    )
    print(
        f"{'precision':9} {'evals/s':>8} {'x fp32':>6} {'top-1':>6} {'KL':>8} {'value MAE':>9} "
        f"{'score MAE':>9} {'bounds':>6} {'MB':>5}  provider"
    )
    for r in rows:
        rep = r["parity_vs_fp32_file"]
        print(
            f"{r['precision']:9} {r['evals_per_s']:8.0f} {r['evals_per_s'] / base:6.2f} "
            f"{rep.top1:6.1%} {rep.kl:8.2g} {rep.value_mae:9.2g} {rep.score_mae:9.2g} "
            f"{'ok' if r['within_bounds'] else 'OUT':>6} {r['file_bytes'] / 2**20:5.1f}  "
            f"{r['provider']}"
        )
    entropy = rows[0]["parity_vs_fp32_file"].ref_entropy
    print(
        f"fp32 policy entropy {entropy:.2f} nats (uniform: {np.log(n * n + 1):.2f}; near it "
        f"top-1 only breaks ties)"
    )
    for r in rows:
        if r["parity_at_export"] is not None:
            print(f"  recorded at export vs torch: {r['parity_at_export'].summary()}")


def precision_figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Flat figures per fp16/int8 row against the fp32 row of the same run (``make bench``
    judges issue 13's targets on them): ``int8_over_fp32`` (raw evals/s ratio),
    ``int8_top1``, ``int8_kl``, ``int8_value_mae``, ``int8_score_mae`` (parity with the fp32
    file)."""
    base = next((r for r in rows if r["precision"] == "fp32"), None)
    if base is None or not base["evals_per_s"]:
        return {}
    out: dict[str, float] = {}
    for r in rows:
        p = r["precision"]
        if p == "fp32":
            continue
        rep = r["parity_vs_fp32_file"]
        out[f"{p}_over_fp32"] = r["evals_per_s"] / base["evals_per_s"]
        for key in ("top1", "kl", "value_mae", "score_mae"):
            out[f"{p}_{key}"] = float(getattr(rep, key))
    return out


def _report_dict(rep: Any) -> dict[str, Any] | None:
    import dataclasses

    return None if rep is None else dataclasses.asdict(rep)


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


def bench_sweep(
    path: str, n: int, max_batch: int, seconds: float, device: str, precision: str = "auto"
) -> dict[int, float]:
    """Raw ONNX Runtime evals/s at batch sizes 1, 2, 4, ... up to 2 * max_batch (one session)."""
    from inference.engine import Engine

    eng = Engine(path, device=device, precision=precision)
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= 2 * max_batch]
    each = max(1.0, seconds / len(sizes))
    return {b: bench_raw(path, n, b, each, device, engine=eng)["evals_per_s"] for b in sizes}
