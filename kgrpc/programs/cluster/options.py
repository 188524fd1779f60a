"""What a ``kgrpc-cluster`` run is asked to do: :class:`ClusterConfig` and its command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass
class ClusterConfig:
    data_dir: str = "demo-data"
    board_size: int = 9
    workers: int = 2
    generations: int = 3
    blocks: int = 2
    channels: int = 32
    visits: int = 24
    parallel_games: int = 16
    gating_games: int = 16
    gating_elo_threshold: float = 20.0
    steps_per_generation: int = 300
    min_new_rows: int = 8000
    batch_size: int = 128
    learning_rate: float = 1e-3
    komi: float = 7.5
    eval_games: int = 10
    ladder_games: int = 0
    max_minutes: float = 30.0
    fresh: bool = True
    view: str = "auto"  # auto | live | plain
    http_listen: str = "127.0.0.1:0"  # the coordinator's dashboard; "" = off
    tls: bool = False  # every daemon over TLS, with a private CA made in DATA_DIR/tls

    def check(self) -> None:
        if not 2 <= self.board_size <= 19:
            raise ValueError(f"--board-size must be between 2 and 19, got {self.board_size}")
        if self.workers < 1 or self.generations < 1:
            raise ValueError("--workers and --generations must be >= 1")
        if self.gating_games < 2 or self.gating_games % 2:
            raise ValueError("--gating-games must be even and >= 2")


def parse_args(argv: list[str] | None) -> ClusterConfig:
    d = ClusterConfig()
    p = argparse.ArgumentParser(
        prog="kgrpc-cluster",
        description="Run the whole kgrpc loop locally: coordinator, inference server, workers "
        "and trainer on loopback, for a few generations (self-play -> train -> publish -> "
        "gating -> release), with a live view and a final summary.",
    )
    p.add_argument(
        "--data-dir",
        default=d.data_dir,
        help=f"where everything goes (default {d.data_dir}); a new or empty "
        "directory, or one of kgrpc-cluster's own earlier runs",
    )
    p.add_argument(
        "--board-size", type=int, default=d.board_size, help=f"board size (default {d.board_size})"
    )
    p.add_argument(
        "--workers", type=int, default=d.workers, help=f"self-play workers (default {d.workers})"
    )
    p.add_argument(
        "--generations",
        type=int,
        default=d.generations,
        help=f"candidates the trainer exports before the run ends (default {d.generations})",
    )
    p.add_argument(
        "--blocks", type=int, default=d.blocks, help=f"residual blocks (default {d.blocks})"
    )
    p.add_argument(
        "--channels", type=int, default=d.channels, help=f"channels (default {d.channels})"
    )
    p.add_argument(
        "--visits", type=int, default=d.visits, help=f"visits per full search (default {d.visits})"
    )
    p.add_argument(
        "--parallel-games",
        type=int,
        default=d.parallel_games,
        help=f"games each worker plays at once (default {d.parallel_games})",
    )
    p.add_argument(
        "--gating-games",
        type=int,
        default=d.gating_games,
        help=f"games of each gating match (default {d.gating_games})",
    )
    p.add_argument(
        "--gating-elo-threshold",
        type=float,
        default=d.gating_elo_threshold,
        help=f"Elo a candidate must gain to be released (default {d.gating_elo_threshold})",
    )
    p.add_argument(
        "--steps-per-generation",
        type=int,
        default=d.steps_per_generation,
        help=f"training steps per candidate (default {d.steps_per_generation})",
    )
    p.add_argument(
        "--min-new-rows",
        type=int,
        default=d.min_new_rows,
        help=f"new positions needed before each training round (default {d.min_new_rows})",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=d.batch_size,
        help=f"training batch (default {d.batch_size})",
    )
    p.add_argument(
        "--learning-rate",
        type=float,
        default=d.learning_rate,
        help=f"Adam learning rate (default {d.learning_rate})",
    )
    p.add_argument("--komi", type=float, default=d.komi, help=f"komi (default {d.komi})")
    p.add_argument(
        "--eval-games",
        type=int,
        default=d.eval_games,
        help=f"games of each final evaluation match (default {d.eval_games}; 0 = none)",
    )
    p.add_argument(
        "--ladder-games",
        type=int,
        default=d.ladder_games,
        help="games per pairing of a rating ladder played during the run (kgrpc-eval "
        "ladder --follow: each release against random play, the first model and "
        "GNU Go level 1 when installed; results in the live view, the summary "
        "and DATA_DIR/ladder); 0 = none (default)",
    )
    p.add_argument(
        "--max-minutes",
        type=float,
        default=d.max_minutes,
        help=f"give up after this long (default {d.max_minutes})",
    )
    p.add_argument(
        "--keep",
        dest="fresh",
        action="store_false",
        help="keep what an earlier run left in the data dir (default: empty it first)",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="run every connection over TLS: a private CA and a server certificate "
        "for 127.0.0.1 are made in DATA_DIR/tls with the openssl command "
        "(default: plaintext on loopback)",
    )
    p.add_argument(
        "--view",
        choices=["auto", "live", "plain"],
        default=d.view,
        help="live: redraw a table; plain: a status line every 15 s; auto: live on a terminal",
    )
    p.add_argument(
        "--http-listen",
        default=d.http_listen,
        metavar="ADDR",
        help="the coordinator's dashboard and /metrics (default 127.0.0.1:0, any free "
        "port, printed at start; '' = off)",
    )
    ns = p.parse_args(argv)
    fields = ClusterConfig.__dataclass_fields__
    cfg = ClusterConfig(**{k: v for k, v in vars(ns).items() if k in fields})
    try:
        cfg.check()
    except ValueError as exc:
        p.error(str(exc))
    return cfg
