"""``kgrpc-bench``: throughput benchmarks that print figures and ratios."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from kgrpc.cli_help import ProgramParser, env_flag

# name -> module; imported lazily so `kgrpc-bench rules` needs neither torch nor onnxruntime.
BENCHMARKS = {
    "rules": "kgrpc.programs.bench.rules",
    "ingest": "kgrpc.programs.bench.ingest",
    "fleet": "kgrpc.programs.bench.fleet",
    "mcts": "kgrpc.programs.bench.mcts",
    "inference": "kgrpc.programs.bench.inference",
    "selfplay": "kgrpc.programs.bench.selfplay",
    "train": "kgrpc.programs.bench.train",
    "shard-read": "kgrpc.programs.bench.shard_read",
    "all": "kgrpc.programs.bench.report",
}


def build_parser() -> argparse.ArgumentParser:
    """Every flag also reads ``KGRPC_BENCH_<FLAG>`` (kgrpc.cli_help: flag > variable >
    default)."""
    parser = ProgramParser(
        prog="kgrpc-bench",
        description="kgrpc benchmarks. Each prints its figures; --json FILE also writes them.",
        env_program="bench",
    )
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name, module_name in BENCHMARKS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a missing optional dependency (torch, onnxruntime)
            p = sub.add_parser(name, help=f"(unavailable: {exc})")
            p.set_defaults(_unavailable=str(exc))
            continue
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        if not any(a.dest == "json" for a in p._actions):
            env_flag(p, "--json", metavar="FILE", help="also write the figures as JSON to FILE")
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "_unavailable", None):
        print(f"kgrpc-bench {args.benchmark}: unavailable: {args._unavailable}", file=sys.stderr)
        return 2
    result = args._module.run(args)
    if result is None:
        return 0
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
