"""The figures ``make bench`` judges (``kgrpc-bench all``'s report): benchmark, JSON key,
the bound and what the figure is. Each target's benchmark must write its key (a test
checks that every target's benchmark is in the report's plan)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    bench: str
    key: str
    op: str  # ">=" or "<="
    value: float
    what: str

    def ratio(self, figure: float) -> float:
        if self.op == ">=":
            return figure / self.value if self.value else math.inf
        return self.value / figure if figure else math.inf

    def met(self, figure: float) -> bool:
        return figure >= self.value if self.op == ">=" else figure <= self.value


TARGETS = [
    Target(
        "rules", "playout_moves_per_s_9", ">=", 2_000_000, "random-playout moves/s, 9x9, one core"
    ),
    Target(
        "rules", "playout_moves_per_s_19", ">=", 60_000, "random-playout moves/s, 19x19, one core"
    ),
    Target(
        "rules",
        "replay_encode_positions_per_s_19",
        ">=",
        15_000,
        "replay+encode positions/s, 19x19",
    ),
    Target("ingest", "games_per_s", ">=", 500, "19x19 games/s accepted with full validation"),
    # Issue 26: the shared engines' cost against SQLite+local (higher is better).
    Target("ingest", "games_per_s_ratio_pg_s3", ">=", 0.7, "PostgreSQL+S3 games/s / SQLite+local"),
    Target(
        "ingest",
        "cpu_per_game_ratio_pg_s3",
        ">=",
        0.7,
        "SQLite+local coordinator CPU per game / PostgreSQL+S3's",
    ),
    Target("fleet", "errors", "<=", 0, "errors of the simulated volunteers"),
    Target("fleet", "p99_ms", "<=", 1000, "worst RPC's p99 latency, ms, simulated volunteers"),
    Target("mcts", "mcts_visits_per_s_9", ">=", 100_000, "free-evaluator visits/s, 9x9, one core"),
    Target(
        "mcts", "mcts_visits_per_s_19", ">=", 50_000, "free-evaluator visits/s, 19x19, one core"
    ),
    Target(
        "inference",
        "grpc_over_raw",
        ">=",
        0.9,
        "gRPC server evals/s / raw ORT (b6c96 19x19, 64 clients)",
    ),
    Target("selfplay", "evals_over_raw", ">=", 0.8, "self-play NN evals/s / raw ORT (b6c96 19x19)"),
    Target(
        "selfplay", "visits_per_s", ">=", 270, "visits/s, b6c96 19x19 (KataGo 1.17 Eigen: ~270)"
    ),
    # Issue 12: with the native search a small net's self-play runs near the network's speed,
    # and fp32 b6c96 self-play matches KataGo's ratio of visits/s to raw ORT evals/s.
    Target(
        "selfplay_b2c32_9x9",
        "evals_over_raw",
        ">=",
        0.7,
        "self-play NN evals/s / raw ORT (b2c32 9x9)",
    ),
    Target(
        "selfplay",
        "visits_over_raw_fp32",
        ">=",
        1.36,
        "fp32 self-play new visits/s / raw fp32 ORT evals/s (b6c96 19x19, native search)",
    ),
    # Issue 13 (precisions), measured in one run each: raw evals/s of the int8 file against the
    # fp32 file and its parity with it (a net fitted to the synthetic teacher, so top-1 means
    # something), and self-play on the int8 file against raw fp32 evals/s of the same run.
    Target(
        "inference_precisions",
        "int8_over_fp32",
        ">=",
        1.5,
        "int8 raw ORT evals/s / fp32 (b6c96 19x19)",
    ),
    Target("inference_precisions", "int8_top1", ">=", 0.95, "int8 policy top-1 vs fp32"),
    Target("inference_precisions", "int8_value_mae", "<=", 0.03, "int8 value MAE vs fp32"),
    Target(
        "selfplay_int8",
        "visits_over_raw_fp32",
        ">=",
        1.77,
        "int8 self-play visits/s / raw fp32 ORT evals/s (b6c96 19x19, native search)",
    ),
    Target("train", "data_wait_share", "<=", 0.05, "share of step time waiting for data"),
]
