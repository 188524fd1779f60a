"""The precision table of ``kgrpc-bench inference --precision fp32,fp16,int8``.

:func:`prepare_models` gives the fp32 file with every listed variant beside it (a fresh net
exported in each precision, or the missing variants of ``--model`` converted into a temporary
folder by :func:`convert_file`, which ``kgrpc-bench selfplay`` uses too) and the random-game
position sets; :func:`compare_precisions` measures each file's raw evals/s in interleaved
rounds and its parity with the fp32 file; :func:`print_precisions` prints the table and
:func:`precision_figures` flattens it into the figures ``make bench`` judges.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from kgrpc.programs.bench.inference_load import bench_raw


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
