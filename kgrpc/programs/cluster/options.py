"""What a ``kgrpc-cluster`` run is asked to do: :class:`ClusterConfig` and its command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from kgrpc.cli_help import ProgramParser, env_flag


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


def build_parser() -> argparse.ArgumentParser:
    """Every flag also reads ``KGRPC_CLUSTER_<FLAG>`` (kgrpc.cli_help: flag > variable >
    default)."""
    d = ClusterConfig()
    p = ProgramParser(
        prog="kgrpc-cluster",
        description="Run the whole kgrpc loop locally: coordinator, inference server, workers "
        "and trainer on loopback, for a few generations (self-play -> train -> publish -> "
        "gating -> release), with a live view and a final summary.",
        env_program="cluster",
    )
    env_flag(
        p,
        "--data-dir",
        default=d.data_dir,
        help="where everything goes: a new or empty directory, or one of kgrpc-cluster's own "
        "earlier runs",
    )
    env_flag(p, "--board-size", type=int, default=d.board_size, help="board size")
    env_flag(p, "--workers", type=int, default=d.workers, help="self-play workers")
    env_flag(
        p,
        "--generations",
        type=int,
        default=d.generations,
        help="candidates the trainer exports before the run ends",
    )
    env_flag(p, "--blocks", type=int, default=d.blocks, help="residual blocks")
    env_flag(p, "--channels", type=int, default=d.channels, help="channels")
    env_flag(p, "--visits", type=int, default=d.visits, help="visits per full search")
    env_flag(
        p,
        "--parallel-games",
        type=int,
        default=d.parallel_games,
        help="games each worker plays at once",
    )
    env_flag(
        p, "--gating-games", type=int, default=d.gating_games, help="games of each gating match"
    )
    env_flag(
        p,
        "--gating-elo-threshold",
        type=float,
        default=d.gating_elo_threshold,
        help="Elo a candidate must gain to be released",
    )
    env_flag(
        p,
        "--steps-per-generation",
        type=int,
        default=d.steps_per_generation,
        help="training steps per candidate",
    )
    env_flag(
        p,
        "--min-new-rows",
        type=int,
        default=d.min_new_rows,
        help="new positions needed before each training round",
    )
    env_flag(p, "--batch-size", type=int, default=d.batch_size, help="training batch")
    env_flag(p, "--learning-rate", type=float, default=d.learning_rate, help="Adam learning rate")
    env_flag(p, "--komi", type=float, default=d.komi, help="komi")
    env_flag(
        p,
        "--eval-games",
        type=int,
        default=d.eval_games,
        help="games of each final evaluation match (0 = none)",
    )
    env_flag(
        p,
        "--ladder-games",
        type=int,
        default=d.ladder_games,
        help="games per pairing of a rating ladder played during the run (kgrpc-eval "
        "ladder --follow: each release against random play, the first model and "
        "GNU Go level 1 when installed; results in the live view, the summary "
        "and DATA_DIR/ladder); 0 = none",
    )
    env_flag(p, "--max-minutes", type=float, default=d.max_minutes, help="give up after this long")
    env_flag(
        p,
        "--keep",
        dest="fresh",
        action="store_false",
        help="keep what an earlier run left in the data dir (off: empty it first)",
    )
    env_flag(
        p,
        "--tls",
        action="store_true",
        help="run every connection over TLS: a private CA and a server certificate "
        "for 127.0.0.1 are made in DATA_DIR/tls with the openssl command "
        "(off: plaintext on loopback)",
    )
    env_flag(
        p,
        "--view",
        choices=["auto", "live", "plain"],
        default=d.view,
        help="live: redraw a table; plain: a status line every 15 s; auto: live on a terminal",
    )
    env_flag(
        p,
        "--http-listen",
        default=d.http_listen,
        metavar="ADDR",
        help="the coordinator's dashboard and /metrics (port 0: any free port, printed at "
        "start; '' = off)",
    )
    return p


def parse_args(argv: list[str] | None) -> ClusterConfig:
    p = build_parser()
    ns = p.parse_args(argv)
    fields = ClusterConfig.__dataclass_fields__
    cfg = ClusterConfig(**{k: v for k, v in vars(ns).items() if k in fields})
    try:
        cfg.check()
    except ValueError as exc:
        p.error(str(exc))
    return cfg
