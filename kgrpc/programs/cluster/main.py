"""The ``kgrpc-cluster`` entry point: read the options, claim the data dir, run the loop."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from kgrpc.programs.cluster.datadir import DataDirError, prepare_data_dir
from kgrpc.programs.cluster.options import build_parser, parse_args
from kgrpc.programs.cluster.run import Cluster

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        prepare_data_dir(Path(cfg.data_dir).resolve(), fresh=cfg.fresh)
    except DataDirError as exc:
        print(f"kgrpc-cluster: {exc}", file=sys.stderr, flush=True)
        return 2
    return asyncio.run(Cluster(cfg).run())


if __name__ == "__main__":
    sys.exit(main())
