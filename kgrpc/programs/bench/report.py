"""``kgrpc-bench all`` (``make bench``): every benchmark, one report.

Runs each benchmark as its own process (``kgrpc-bench NAME --json ...``) so that one
benchmark's threads and memory do not colour the next, then writes into ``--out``:
``report.md`` (machine, every figure, its target and the ratio), ``report.json`` (the same
figures, machine-readable) and ``batch_throughput_<run>.svg`` (ONNX Runtime evals/s against
batch size, one per inference run, from its sweep).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from kgrpc.cli_help import env_flag
from kgrpc.programs.bench.targets import TARGETS

HELP = "run every benchmark and write a markdown + JSON report (make bench)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    env_flag(p, "--out", default="bench-out", help="output folder")
    env_flag(p, "--seconds", type=float, default=10.0, help="duration of each timed phase")
    env_flag(
        p,
        "--only",
        nargs="*",
        default=None,
        show="all",
        help="run only these benchmarks (rules mcts ingest fleet inference selfplay train; the "
        "variable: comma-separated)",
    )
    env_flag(p, "--quick", action="store_true", help="small sizes, for a smoke run")


def machine_description() -> dict:
    info: dict = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "processor": _cpu_model(),
        # int8 speed depends on them (VNNI multiplies uint8 by int8 natively).
        "cpu_flags": " ".join(_cpu_flags()) or "unknown",
    }
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
        info["load_avg_1m_at_start"] = round(os.getloadavg()[0], 2)
    except ImportError:
        pass
    for pkg in ("numpy", "grpcio", "onnxruntime", "torch"):
        try:
            from importlib.metadata import version

            info[pkg] = version(pkg if pkg != "onnxruntime" else _ort_dist())
        except Exception:  # not installed: the report says so
            info[pkg] = "not installed"
    return info


def _ort_dist() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            version(dist)
            return dist
        except PackageNotFoundError:
            continue
    return "onnxruntime"


def _cpuinfo(field: str) -> str:
    """The first ``field`` line of /proc/cpuinfo ("" where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":", 1)[0].strip() == field:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown"


# The instruction-set flags that move ONNX Runtime's figures (int8 needs VNNI to run fast).
_REPORTED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")


def _cpu_flags() -> list[str]:
    have = set(_cpuinfo("flags").split())
    return [f for f in _REPORTED_FLAGS if f in have]


def _bench_cmd(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "kgrpc.programs.bench.cli", name, *args]


def _selfplay_cmd(json_out: Path, model: Path, seconds: str, games: int, *extra: str) -> list[str]:
    """A self-play run of ``model`` (100 visits a move), its figures written to ``json_out``."""
    return _bench_cmd(
        "selfplay",
        "--model",
        str(model),
        *extra,
        "--parallel-games",
        str(games),
        "--visits",
        "100",
        "--seconds",
        seconds,
        "--json",
        str(json_out),
    )


def _train_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainer", *args]


def plan(out: Path, seconds: float, quick: bool) -> dict[str, list[list[str]]]:
    """Commands per benchmark (models are made first, by `kgrpc-train init`)."""
    s = str(seconds)
    big = out / "b6c96-19.onnx"
    small = out / "b4c64-9.onnx"
    tiny = out / "b2c32-9.onnx"
    blocks, channels = ("2", "32") if quick else ("6", "96")
    return {
        "rules": [
            _bench_cmd(
                "rules", "--seconds", str(min(seconds, 3.0)), "--json", str(out / "rules.json")
            )
        ],
        "mcts": [
            _bench_cmd(
                "mcts", "--seconds", str(min(seconds, 5.0)), "--json", str(out / "mcts.json")
            )
        ],
        # 600 games (about 37,000 rows) ended before the first shard cut (50,000 rows), so the
        # figure left out the cuts and window rebuilds of a running coordinator; 3,000 hold four.
        "ingest": [
            _bench_cmd(
                "ingest",
                "--games",
                "100" if quick else "3000",
                "--board-size",
                "19",
                "--uploaders",
                "4",
                "--json",
                str(out / "ingest.json"),
            )
        ],
        # Issue 26: its target is 10,000 volunteers; --quick and a 2-core machine take fewer.
        "fleet": [
            _bench_cmd(
                "fleet",
                "--workers",
                "20" if quick else "1000",
                "--seconds",
                str(min(seconds, 5.0)) if quick else str(max(seconds, 60.0)),
                "--json",
                str(out / "fleet.json"),
            )
        ],
        # Issue 26: the trainer's shard reads from the blob store against local files.
        "shard-read": [
            _bench_cmd(
                "shard-read",
                "--shards",
                "2" if quick else "8",
                "--rows",
                "512" if quick else "4096",
                "--json",
                str(out / "shard-read.json"),
            )
        ],
        "models": [
            _train_cmd(
                "init",
                "--board-size",
                "19",
                "--blocks",
                blocks,
                "--channels",
                channels,
                "--out",
                str(big),
            ),
            _train_cmd(
                "init",
                "--board-size",
                "9",
                "--blocks",
                "4",
                "--channels",
                "64",
                "--out",
                str(small),
            ),
            _train_cmd(
                "init",
                "--board-size",
                "9",
                "--blocks",
                "2",
                "--channels",
                "32",
                "--out",
                str(tiny),
            ),
        ],
        "inference": [
            _bench_cmd(
                "inference",
                "--model",
                str(big),
                "--clients",
                "64",
                "--batch",
                "16",
                "--seconds",
                s,
                "--json",
                str(out / "inference.json"),
            ),
            _bench_cmd(
                "inference",
                "--arch",
                f"b{blocks}c{channels}",
                "--board-size",
                "19",
                "--precision",
                "fp32,fp16,int8",
                "--raw-only",
                "--fit-steps",
                "50" if quick else "300",
                "--seconds",
                s,
                "--json",
                str(out / "inference_precisions.json"),
            ),
            _bench_cmd(
                "inference",
                "--model",
                str(small),
                "--clients",
                "64",
                "--batch",
                "16",
                "--seconds",
                s,
                "--json",
                str(out / "inference_9x9.json"),
            ),
        ],
        "selfplay": [
            _selfplay_cmd(out / "selfplay.json", big, s, 32),
            _selfplay_cmd(
                out / "selfplay_int8.json", big, s, 32, "--precision", "int8", "--modes", "local"
            ),
            _selfplay_cmd(out / "selfplay_9x9.json", small, s, 64, "--board-size", "9"),
            _selfplay_cmd(
                out / "selfplay_b2c32_9x9.json",
                tiny,
                s,
                64,
                "--board-size",
                "9",
                "--modes",
                "local",
            ),
        ],
        "train": [
            _bench_cmd(
                "train",
                "--blocks",
                blocks,
                "--channels",
                channels,
                "--board-size",
                "19",
                "--json",
                str(out / "train.json"),
            )
        ],
    }


def svg_line_chart(points: list[tuple[float, float]], title: str, xlabel: str, ylabel: str) -> str:
    """A dependency-free SVG line chart (log2 x axis)."""
    w, h, pad = 560, 340, 60
    xs = [math.log2(max(x, 1)) for x, _ in points]
    ys = [y for _, y in points]
    x0, x1 = min(xs), max(xs) or 1
    y1 = max(ys) * 1.1 or 1

    def px(x: float) -> float:
        return pad + (x - x0) / ((x1 - x0) or 1) * (w - 2 * pad)

    def py(y: float) -> float:
        return h - pad - y / y1 * (h - 2 * pad)

    path = " ".join(
        f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}"
        for i, (x, y) in enumerate(zip(xs, ys, strict=True))
    )
    ticks = "".join(
        f'<text x="{px(x):.1f}" y="{h - pad + 18}" font-size="11" '
        f'text-anchor="middle">{int(2**x)}</text>'
        f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3"/>'
        f'<text x="{px(x):.1f}" y="{py(y) - 8:.1f}" font-size="10" '
        f'text-anchor="middle">{y:.0f}</text>'
        for x, y in zip(xs, ys, strict=True)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">'
        f'<rect width="{w}" height="{h}" fill="white"/>'
        f'<text x="{w / 2}" y="24" font-size="14" text-anchor="middle">{title}</text>'
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>'
        f'<text x="{w / 2}" y="{h - 15}" font-size="12" text-anchor="middle">{xlabel}</text>'
        f'<text x="15" y="{h / 2}" font-size="12" transform="rotate(-90 15 {h / 2})" '
        f'text-anchor="middle">{ylabel}</text>'
        f'<path d="{path}" fill="none" stroke="steelblue" stroke-width="2"/>{ticks}</svg>'
    )


def _fmt_ratio(ratio: float) -> str:
    return f"{ratio:.2f}" if ratio < 100 else "> 100"


def render_markdown(machine: dict, results: dict[str, dict], failures: dict[str, str]) -> str:
    lines = [
        "# kgrpc benchmark report",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in machine.items()]
    lines += [
        "",
        "## Targets",
        "",
        "| benchmark | figure | measured | target | ratio | met |",
        "|---|---|---|---|---|---|",
    ]
    for t in TARGETS:
        fig = results.get(t.bench, {}).get(t.key)
        if isinstance(fig, int | float):
            lines.append(
                f"| {t.bench} | {t.what} (`{t.key}`) | {fig:,.3f} | {t.op} {t.value:,} | "
                f"{_fmt_ratio(t.ratio(fig))} | {'yes' if t.met(fig) else 'no'} |"
            )
        else:
            lines.append(
                f"| {t.bench} | {t.what} (`{t.key}`) | — | {t.op} {t.value:,} | — | not run |"
            )
    for name, figures in results.items():
        lines += ["", f"## {name}", "", "| key | value |", "|---|---|"]
        for k, v in sorted(figures.items()):
            if isinstance(v, float):
                v = f"{v:,.3f}"
            elif isinstance(v, dict | list):
                v = "`" + json.dumps(v)[:200] + "`"
            lines.append(f"| {k} | {v} |")
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- **{k}**: {v}" for k, v in failures.items()]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_description()
    commands = plan(out, args.seconds, args.quick)
    selected = args.only or [name for name in commands if name != "models"]
    if {"inference", "selfplay"} & set(selected):
        selected = ["models", *selected]  # the random nets both of them measure
    results: dict[str, dict] = {}
    failures: dict[str, str] = {}
    for name in selected:
        print(f"== {name}", flush=True)
        for cmd in commands[name]:
            proc = subprocess.run(cmd, check=False)
            if proc.returncode != 0:
                failures[name] = f"`{' '.join(cmd[2:])}` exited {proc.returncode}"
                break
        for json_file in sorted(out.glob(f"{name}*.json")):
            key = json_file.stem
            results[key] = json.loads(json_file.read_text())
    for key, figures in results.items():
        sweep = figures.get("raw_by_batch") if key.startswith("inference") else None
        if isinstance(sweep, dict) and sweep:
            pts = sorted((float(k), float(v)) for k, v in sweep.items())
            n = figures.get("board_size", "?")
            (out / f"batch_throughput_{key}.svg").write_text(
                svg_line_chart(
                    pts, f"ONNX Runtime evals/s vs batch size ({n}x{n})", "batch size", "evals/s"
                )
            )
    report = {
        "machine": machine,
        "results": results,
        "failures": failures,
        "targets": [t.__dict__ for t in TARGETS],
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(render_markdown(machine, results, failures))
    print(f"report: {out / 'report.md'} (+ report.json)")
    return report
