"""``kgrpc-bench shard-read``: the trainer's read throughput from the blob store against local
disk (issue 26's third benchmark).

Writes ``--shards`` synthetic shards of the real format (kgrpc.programs.bench.train) and a
SQLite index listing them (the ``shards`` rows a coordinator writes at a cut: size, sha256,
games, rows), then loads the whole window the way ``kgrpc-train run`` does, three ways, each
into a fresh loader (and, for the stores, an empty cache):

* ``local``: the files in place (:class:`trainer.data.ShardIndex`, no store mode);
* ``store-dir``: store mode on a directory store (download = copy, sha256, rename);
* ``store-s3``: store mode on a SeaweedFS ``weed mini`` on loopback (engines.py), skipped with
  a note when it is not installed.

Every figure is MB of shard files per second of wall time, and rows per second, from the
start of the load to a window ready to train on; the shards were just written, so the page
cache holds them: the figure is the cost of the path (the S3 protocol, the checks, the cache
writes, the npz reads), not of a disk. JSON: ``local_mb_per_s``, ``store_dir_mb_per_s``,
``store_s3_mb_per_s`` (None when skipped), ``s3_ratio_to_local``, and the sizes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from kgrpc.cli_help import env_flag

HELP = "trainer shard reads: from the blob store (directory, S3) against local disk"
BIG = 1 << 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env_flag(parser, "--shards", type=int, default=8, help="synthetic shards in the window")
    env_flag(parser, "--rows", type=int, default=4096, help="positions per shard")
    env_flag(parser, "--board-size", type=int, default=19, help="board size")
    env_flag(parser, "--repeat", type=int, default=2, help="loads of each kind; the best counts")
    env_flag(parser, "--json", metavar="FILE", help="also write the figures as JSON")


def index_shards(data_dir: Path, paths: list[Path]) -> None:
    """The ``shards`` rows a coordinator would have written for ``paths``."""
    from kgrpc import shards
    from kgrpc.coordinator import db
    from kgrpc.digest import file_digest

    conn = db.connect(data_dir)
    try:
        for i, p in enumerate(paths):
            h = shards.read_header(p)
            d = file_digest(p)
            conn.execute(
                "INSERT INTO shards (run, idx, file_name, size_bytes, sha256, games, positions, "
                "board_size, komi, rules, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (p.parent.name, i + 1, p.name, d.size, d.sha256, h.games, h.rows, h.board_size)
                + (7.5, "chinese", 1_000 + i),
            )
    finally:
        conn.close()


def _timed_load(shard_list: list[Any], fetch: Any = None) -> tuple[float, int]:
    from trainer.data import WindowLoader

    loader = WindowLoader(10**9, strict=True)
    loader.fetch = fetch
    t0 = time.perf_counter()
    window = loader.load(shard_list)
    return time.perf_counter() - t0, window.rows


def _best(repeat: int, one: Any) -> tuple[float, int]:
    """The fastest of ``repeat`` calls of ``one(i)`` (the others lose to other processes)."""
    return min(one(i) for i in range(max(1, repeat)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from kgrpc.blobstore import LocalBlobStore, open_store
    from kgrpc.programs.bench import engines
    from kgrpc.programs.bench.train import write_synthetic_run
    from trainer.data import ShardIndex
    from trainer.store_shards import StoreShards

    figures: dict[str, tuple[float, int] | None] = {}
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="kgrpc-bench-shard-read-") as tmp:
        src = Path(tmp) / "coordinator"
        paths = write_synthetic_run(
            src, args.shards, args.rows, max(1, args.rows // 100), args.board_size
        )
        index_shards(src, paths)
        total = sum(p.stat().st_size for p in paths)
        index = str(src / "coordinator.sqlite3")

        def from_store(store: Any, name: str) -> Any:
            def one(i: int) -> tuple[float, int]:
                source = StoreShards(index, store, Path(tmp) / f"cache-{name}-{i}", BIG)
                try:
                    return _timed_load(source.refresh(), source.fetch)
                finally:
                    source.close()

            return one

        figures["local"] = _best(args.repeat, lambda i: _timed_load(ShardIndex(src).refresh()))
        figures["store-dir"] = _best(args.repeat, from_store(LocalBlobStore(src), "dir"))

        why = engines.missing("s3")
        if why:
            figures["store-s3"] = None
            notes["store-s3"] = why
        else:
            server = engines.SeaweedServer(engines.find_weed() or "weed")
            try:
                bucket = open_store(server.new_url(), options=server.options())
                for p in paths:
                    bucket.put_file(f"training_data/{p.parent.name}/{p.name}", p)
                figures["store-s3"] = _best(args.repeat, from_store(bucket, "s3"))
            finally:
                server.close()

    def mb_s(name: str) -> float | None:
        f = figures.get(name)
        return None if f is None else total / 1e6 / f[0]

    local = mb_s("local")
    s3 = mb_s("store-s3")
    result = {
        "local_mb_per_s": local,
        "store_dir_mb_per_s": mb_s("store-dir"),
        "store_s3_mb_per_s": s3,
        "s3_ratio_to_local": None if s3 is None or not local else s3 / local,
        "shards": args.shards,
        "rows_per_shard": args.rows,
        "board_size": args.board_size,
        "repeat": args.repeat,
        "window_mb": total / 1e6,
        "notes": notes,
    }
    print(
        f"kgrpc-bench shard-read: {args.shards} shards of {args.rows} rows "
        f"({args.board_size}x{args.board_size}), {total / 1e6:.1f} MB, page cache warm"
    )
    print(f"  {'source':<12}{'MB/s':>10}{'rows/s':>12}{'vs local':>10}")
    for name in ("local", "store-dir", "store-s3"):
        f = figures.get(name)
        if f is None:
            print(f"  {name:<12}{'skipped':>10}  ({notes.get(name, '')})")
            continue
        rate = total / 1e6 / f[0]
        ratio = rate / local if local else float("nan")
        print(f"  {name:<12}{rate:>10.1f}{f[1] / f[0]:>12.0f}{ratio:>10.2f}")
    return result
