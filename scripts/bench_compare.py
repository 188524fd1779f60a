#!/usr/bin/env python3
"""Compare ``kgrpc-bench`` figures of two checkouts, measured in one run.

A refactor must not cost speed, and figures from different days differ by 10-40% on shared
machines, so both checkouts are measured here, interleaved with the order alternating
(A B, B A, A B, ...: :func:`run_order`), and each figure is the median of ``--runs`` runs (an
even number balances the order). Each checkout runs its own ``.venv/bin/kgrpc-bench`` (make
install in it first), or, with ``--python PY``, one shared interpreter runs each checkout's own
code (``PY -m <its bench module>`` from the checkout's root, which Python puts first on
``sys.path``): for checkouts whose dependencies match, without a second install. Prints one
row per figure: A, B, B/A, and whether B is within ``--tolerance`` of A (a figure where lower
is better, such as a time or a share, is compared the other way round).

    scripts/bench_compare.py --a ../kgrpc-old --b . --bench rules ingest --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# Figures where smaller is better; every other numeric figure is a rate (larger is better).
LOWER_IS_BETTER = ("_s_per_", "wait", "latency", "rss", "_ms", "seconds", "share")


def lower_is_better(key: str) -> bool:
    return any(part in key for part in LOWER_IS_BETTER) and "_per_s" not in key


# Where kgrpc-bench's entry point has lived, newest first.
BENCH_MODULES = ("kgrpc.programs.bench.cli", "kgrpc.bench.cli")


def bench_command(checkout: Path, python: Path | None) -> list[str]:
    """The command that runs ``checkout``'s kgrpc-bench."""
    if python is None:
        exe = checkout / ".venv" / "bin" / "kgrpc-bench"
        if not exe.exists():
            raise SystemExit(f"{exe} not found: run `make install` in {checkout} first")
        return [str(exe)]
    for module in BENCH_MODULES:
        if (checkout / (module.replace(".", "/") + ".py")).exists():
            return [str(python), "-m", module]
    raise SystemExit(f"{checkout}: no kgrpc-bench module ({', '.join(BENCH_MODULES)})")


def run_order(i: int) -> tuple[str, str]:
    """Which checkout runs first in round ``i``: A B, B A, A B, ... On a shared machine the
    first of a pair measured faster by up to 20% whichever code it ran (a warm-up or turbo
    effect), so a fixed order would pass that bias to one side."""
    return ("a", "b") if i % 2 == 0 else ("b", "a")


def run_once(
    checkout: Path, bench: str, extra: list[str], python: Path | None = None
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        subprocess.run(
            [*bench_command(checkout, python), bench, *extra, "--json", str(out)],
            cwd=checkout,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        data = json.loads(out.read_text())
    return {
        k: float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", type=Path, required=True, help="baseline checkout (with .venv)")
    p.add_argument("--b", type=Path, required=True, help="changed checkout (with .venv)")
    p.add_argument(
        "--bench",
        nargs="+",
        default=["rules", "ingest", "inference", "selfplay"],
        help="benchmarks to run (default: %(default)s)",
    )
    p.add_argument("--runs", type=int, default=3, help="runs per checkout (default: %(default)s)")
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="allowed relative loss of B against A (default: %(default)s)",
    )
    p.add_argument(
        "--python",
        type=Path,
        help="one interpreter for both checkouts, each running its own code from its root "
        "(default: each checkout's .venv/bin/kgrpc-bench)",
    )
    p.add_argument(
        "--bench-args",
        default="",
        help="extra arguments for every kgrpc-bench call, e.g. '--seconds 5'",
    )
    args = p.parse_args(argv)
    extra = args.bench_args.split()
    worst_ok = True
    for bench in args.bench:
        runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
        for i in range(args.runs):
            for side in run_order(i):
                print(f"{bench}: run {i + 1}/{args.runs} of {side.upper()}", file=sys.stderr)
                runs[side].append(run_once(getattr(args, side), bench, extra, args.python))
        keys = sorted(set(runs["a"][0]) & set(runs["b"][0]))
        print(f"\n## {bench} (median of {args.runs}, interleaved, order alternating)")
        print(f"{'figure':45} {'A':>14} {'B':>14} {'B/A':>7}  ok")
        for key in keys:
            a = statistics.median(r[key] for r in runs["a"] if key in r)
            b = statistics.median(r[key] for r in runs["b"] if key in r)
            ratio = b / a if a else float("nan")
            if lower_is_better(key):
                ok = b <= a * (1 + args.tolerance) or a == b
            else:
                ok = b >= a * (1 - args.tolerance)
            worst_ok &= ok
            print(f"{key:45} {a:14.4g} {b:14.4g} {ratio:7.3f}  {'yes' if ok else 'NO'}")
    return 0 if worst_ok else 1


if __name__ == "__main__":
    sys.exit(main())
