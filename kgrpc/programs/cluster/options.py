"""What a ``kgrpc-cluster`` run is asked to do: :class:`ClusterConfig` and its command line.

Precedence: the defaults below < ``--profile NAME`` (:mod:`.profiles`) < the flags given.
``--train KEY=VALUE`` passes any further ``kgrpc-train run`` setting (trainer/config.py) and
``--coord KEY=VALUE`` any further coordinator setting (kgrpc/coordinator/config.py); both are
checked here, before anything starts.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields
from typing import Any

from kgrpc.cli_help import ProgramParser, env_flag
from kgrpc.programs.cluster.profiles import PROFILES, describe_profile, setting_text

# Trainer settings the cluster sets from its own options (or must own: addresses, paths).
TRAINER_OWN = {
    "coordinator": "--coordinator is the run's own",
    "token": "the run makes its tokens",
    "tls_ca": "use --tls",
    "data_dir": "use --data-dir",
    "work_dir": "the trainer works in DATA_DIR/trainer",
    "pull_shards": "the trainer reads DATA_DIR",
    "publish": "the run publishes every export",
    "blocks": "use --blocks",
    "channels": "use --channels",
    "generations": "use --generations",
    "steps_per_generation": "use --steps-per-generation",
    "min_new_rows": "use --min-new-rows",
    "batch_size": "use --batch-size",
    "lr": "use --learning-rate",
}
# Coordinator settings the cluster sets from its own options (or must own).
COORDINATOR_OWN = {
    "listen": "the run picks free ports",
    "data_dir": "use --data-dir",
    "run": "the run is run_001",
    "auth": "the run makes its tokens",
    "tls_cert": "use --tls",
    "tls_key": "use --tls",
    "http_listen": "use --http-listen",
    "komi": "use --komi",
    "gating_enabled": "use --gating / --no-gating",
    "gating_games": "use --gating-games",
    "gating_elo_threshold": "use --gating-elo-threshold",
    "curriculum": "use --board-size and --visits",
}


@dataclass
class ClusterConfig:
    data_dir: str = "demo-data"
    board_size: int = 9
    workers: int = 2
    # Workers more at Linux's lowest priority (SCHED_IDLE and nice 19; SPARE_WORKER_NICE in
    # run.py says why): they play on the CPU time the trainer and the other workers leave idle.
    spare_workers: int = 0
    worker_inference: str = "server"  # server: one inference server; local: in each worker
    generations: int = 3  # 0: train until --max-minutes, then evaluate
    blocks: int = 2
    channels: int = 32
    visits: int = 24
    parallel_games: int = 16
    gating: bool = True
    gating_games: int = 16
    gating_elo_threshold: float = 20.0
    steps_per_generation: int = 300
    min_new_rows: int = 8000
    batch_size: int = 128
    learning_rate: float = 1e-3
    komi: float = 7.5
    eval_games: int = 10
    eval_visits: int = 0  # 0 = --visits
    ladder_games: int = 0
    # The in-run ladder's budget: rate a release only every this many minutes of the run
    # (0: every release), against these references, at these visits (0: --visits), at this
    # much lower OS priority, so that self-play keeps the cores.
    ladder_every_minutes: float = 0.0
    ladder_references: str = "random,first,gnugo-l1"
    ladder_visits: int = 0
    ladder_nice: int = 10
    final_ladder_games: int = 0
    final_ladder_parallel: int = 2
    max_minutes: float = 30.0
    fresh: bool = True
    view: str = "auto"  # auto | live | plain
    http_listen: str = "127.0.0.1:0"  # the coordinator's dashboard; "" = off
    tls: bool = False  # every daemon over TLS, with a private CA made in DATA_DIR/tls
    # Candidates also exported (calibrated on training positions, parity-checked) and published
    # as int8, which CPU workers then play with: on, off, or auto (on where the CPU multiplies
    # int8 natively, kgrpc.precision.cpu_int8_fast).
    int8: str = "off"
    profile: str = ""
    trainer: dict[str, Any] = field(default_factory=dict)  # more kgrpc-train run settings
    coordinator: dict[str, Any] = field(default_factory=dict)  # more coordinator settings

    @property
    def time_bounded(self) -> bool:
        """Training ends at --max-minutes (then the final evaluation), not after a count."""
        return self.generations == 0

    @property
    def evaluation_visits(self) -> int:
        return self.eval_visits or self.visits

    @property
    def ladder_search_visits(self) -> int:
        return self.ladder_visits or self.visits

    def ladder_reference_list(self) -> list[str]:
        """--ladder-references as a list (the names the coordinator's ratings carry)."""
        return [r.strip() for r in self.ladder_references.split(",") if r.strip()]

    @property
    def int8_enabled(self) -> bool:
        """--int8 resolved: auto is on where this CPU has an int8 dot product."""
        if self.int8 == "auto":
            from kgrpc.precision import cpu_int8_fast

            return cpu_int8_fast()
        return self.int8 == "on"

    def check(self) -> None:
        if not 2 <= self.board_size <= 19:
            raise ValueError(f"--board-size must be between 2 and 19, got {self.board_size}")
        if self.workers < 1 or self.generations < 0:
            raise ValueError("--workers must be >= 1 and --generations >= 0")
        if self.spare_workers < 0:
            raise ValueError(f"--spare-workers must be >= 0, got {self.spare_workers}")
        if self.spare_workers and self.worker_inference != "local":
            raise ValueError(
                "--spare-workers needs --worker-inference local: with an inference server "
                "their positions would run in the server, at its priority"
            )
        if self.spare_workers and not hasattr(os, "SCHED_IDLE"):
            raise ValueError("--spare-workers needs Linux: they run at its SCHED_IDLE policy")
        if self.gating_games < 2 or self.gating_games % 2:
            raise ValueError("--gating-games must be even and >= 2")
        if self.worker_inference not in ("server", "local"):
            raise ValueError(
                f"--worker-inference must be server or local, got {self.worker_inference!r}"
            )
        if self.max_minutes <= 0:
            raise ValueError(f"--max-minutes must be > 0, got {self.max_minutes}")
        for name in (
            "eval_games",
            "eval_visits",
            "ladder_games",
            "ladder_every_minutes",
            "ladder_visits",
            "final_ladder_games",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
        self._check_ladder()
        if self.final_ladder_parallel < 1:
            raise ValueError("--final-ladder-parallel must be >= 1")
        if self.int8 not in ("auto", "on", "off"):
            raise ValueError(f"--int8 must be auto, on or off, got {self.int8!r}")
        self._check_passed_settings()

    def _check_ladder(self) -> None:
        refs = self.ladder_reference_list()
        for ref in refs:
            level = ref.removeprefix("gnugo-l")
            if ref not in ("random", "first") and not (ref != level and level.isdigit()):
                raise ValueError(
                    f"--ladder-references: {ref!r} is not random, first or gnugo-lL (L a level)"
                )
        if self.ladder_games > 0 and not refs:
            raise ValueError("--ladder-references: name at least one reference")
        if not 0 <= self.ladder_nice <= 19:
            raise ValueError(f"--ladder-nice must be between 0 and 19, got {self.ladder_nice}")

    def trainer_settings(self) -> dict[str, Any]:
        """Every setting the trainer gets: the run's own, then ``trainer``."""
        return {
            "blocks": self.blocks,
            "channels": self.channels,
            "generations": self.generations,
            "steps_per_generation": self.steps_per_generation,
            "min_new_rows": self.min_new_rows,
            "batch_size": self.batch_size,
            "lr": self.learning_rate,
            "poll_interval_s": 5.0,
            "log_every_s": 15.0,
            # Workers run in-process with precision auto: a CPU one takes the int8 file.
            **({"precisions": "fp32,int8"} if self.int8_enabled else {}),
            **self.trainer,
        }

    def coordinator_settings(self) -> dict[str, Any]:
        """Every setting written to DATA_DIR/coordinator.toml: the run's own, then
        ``coordinator``."""
        return {
            "run": "run_001",
            "komi": self.komi,
            "positions_per_shard": max(200, self.min_new_rows // 4),
            "flush_interval_s": 10.0,
            "latest_window_positions": 50000,
            "games_per_batch": 4,
            "selfplay_task_games": 4 * self.parallel_games,
            "full_search_prob": 0.5,
            "cheap_visits": max(4, self.visits // 4),
            "max_moves_per_point": 1.5,
            "heartbeat_interval_s": 5,
            "retry_after_s": 2,
            "gating_enabled": self.gating,
            "gating_games": self.gating_games,
            "match_chunk_games": min(self.gating_games, 2 * max(1, self.parallel_games // 4)),
            "gating_elo_threshold": self.gating_elo_threshold,
            "release_every_steps": 0,
            "curriculum": f"0:{self.board_size}:{self.visits}",
            # Every worker is the operator's, under one token: their names tell them apart.
            "display_names": True,
            **self.coordinator,
        }

    def _check_passed_settings(self) -> None:
        from kgrpc.coordinator.config import SETTINGS as COORDINATOR
        from kgrpc.settings import SettingsError
        from trainer.config import SETTINGS as TRAINER

        for what, given, own, settings, check in (
            ("--train", self.trainer, TRAINER_OWN, TRAINER, "validate"),
            ("--coord", self.coordinator, COORDINATOR_OWN, COORDINATOR, "check"),
        ):
            for key in given:
                if key in own:
                    raise ValueError(f"{what} {key}: set by the run itself ({own[key]})")
            values = self.trainer_settings() if what == "--train" else self.coordinator_settings()
            try:
                getattr(settings.load(flags=values), check)()
            except (SettingsError, ValueError) as exc:
                raise ValueError(f"{what}: {exc}") from None

    def describe(self) -> list[str]:
        """The settings of this run, a few lines for its start."""
        skip = {"trainer", "coordinator", "profile", "fresh", "view", "http_listen"}
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        own["eval_visits"] = self.evaluation_visits
        own["ladder_visits"] = self.ladder_search_visits
        own["int8"] = f"{self.int8} ({'on' if self.int8_enabled else 'off'})"

        def line(title: str, values: dict[str, Any]) -> str:
            return f"{title}: " + ", ".join(f"{k}={setting_text(v)}" for k, v in values.items())

        return [
            line(f"profile {self.profile or '(none)'}", own),
            line("trainer", self.trainer_settings()),
            line("coordinator", self.coordinator_settings()),
        ]


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value.strip()


# --help's groups, in order, and their flags (a new flag must be named in one).
HELP_GROUPS: dict[str, tuple[str, ...]] = {
    "run": ("--profile", "--data-dir", "--generations", "--max-minutes", "--keep"),
    "processes": (
        "--workers",
        "--spare-workers",
        "--worker-inference",
        "--parallel-games",
        "--tls",
    ),
    "game and search": ("--board-size", "--komi", "--visits"),
    "network and training": (
        "--blocks",
        "--channels",
        "--steps-per-generation",
        "--min-new-rows",
        "--batch-size",
        "--learning-rate",
        "--int8",
        "--train",
    ),
    "gating and evaluation": (
        "--gating",
        "--gating-games",
        "--gating-elo-threshold",
        "--eval-games",
        "--eval-visits",
        "--ladder-games",
        "--ladder-every-minutes",
        "--ladder-references",
        "--ladder-visits",
        "--ladder-nice",
        "--final-ladder-games",
        "--final-ladder-parallel",
    ),
    "coordinator": ("--coord",),
    "view": ("--view", "--http-listen"),
}


def build_parser() -> argparse.ArgumentParser:
    """Every flag also reads ``KGRPC_CLUSTER_<FLAG>`` (kgrpc.cli_help). Only the flags given
    (or set in the environment) reach the namespace, so they override ``--profile``:
    flag > variable > profile > default."""
    d = ClusterConfig()
    p = ProgramParser(
        prog="kgrpc-cluster",
        description="Run the whole kgrpc loop locally: coordinator, inference, workers and "
        "trainer on loopback, for a few generations (self-play -> train -> publish -> "
        "gating -> release) or until --max-minutes, with a live view and a final summary.",
        epilog="profiles (--profile NAME; flags given override them):\n"
        + "\n".join(describe_profile(prof) for prof in PROFILES.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
        env_program="cluster",
    )
    groups = {title: p.add_argument_group(title) for title in HELP_GROUPS}
    group_of = {flag: groups[title] for title, flags in HELP_GROUPS.items() for flag in flags}

    def opt(flag: str, help: str, **kw: Any) -> None:
        dest = kw.get("dest", flag.lstrip("-").replace("-", "_"))
        value = getattr(d, dest)
        if kw.get("action") == "store_false":  # the flag's sense is the field's opposite
            show = setting_text(not value)
        elif kw.get("action") == "store_true":
            show = setting_text(value)
        else:
            show = repr(value) if isinstance(value, str) else setting_text(value)
        env_flag(
            p, flag, help=help, default=argparse.SUPPRESS, show=show, group=group_of[flag], **kw
        )

    env_flag(
        p,
        "--profile",
        group=group_of["--profile"],
        choices=sorted(PROFILES),
        default=argparse.SUPPRESS,
        show="none",
        help="named settings (listed below); flags given override them",
    )
    opt("--data-dir", "where everything goes; a new or empty directory, or one of "
        "kgrpc-cluster's own earlier runs")  # fmt: skip
    opt("--board-size", "board size", type=int)
    opt("--workers", "self-play workers", type=int)
    opt(
        "--spare-workers",
        "self-play workers more, at Linux's lowest priority (SCHED_IDLE, nice 19): they play "
        "on the CPU time the trainer and the other workers leave idle (needs "
        "--worker-inference local)",
        type=int,
    )
    opt(
        "--worker-inference",
        "server: one inference server for every worker; local: each worker runs the net "
        "in-process (less overhead on one small machine)",
        choices=["server", "local"],
    )
    opt(
        "--generations",
        "candidates the trainer exports before the run ends; 0 = train until "
        "--max-minutes, then evaluate",
        type=int,
    )
    opt("--blocks", "residual blocks", type=int)
    opt("--channels", "channels", type=int)
    opt("--visits", "visits per full search", type=int)
    opt("--parallel-games", "games each worker plays at once", type=int)
    opt(
        "--gating",
        "gate candidates with a match before release (--no-gating: release every export at once)",
        action="store_true",
    )
    opt("--gating-games", "games of each gating match", type=int)
    opt("--gating-elo-threshold", "Elo a candidate must gain to be released", type=float)
    opt("--steps-per-generation", "training steps per candidate (with --train "
        "samples_per_row=R: the most per candidate)", type=int)  # fmt: skip
    opt("--min-new-rows", "new positions needed before each training round", type=int)
    opt("--batch-size", "training batch", type=int)
    opt("--learning-rate", "Adam learning rate", type=float)
    opt("--komi", "komi", type=float)
    opt("--eval-games", "games of each final in-process match (vs random, vs the first "
        "model); 0 = none", type=int)  # fmt: skip
    opt("--eval-visits", "visits per move of the final evaluation (0 = --visits)", type=int)
    opt(
        "--ladder-games",
        "games per pairing of a rating ladder played during the run (kgrpc-eval ladder "
        "--follow: releases against --ladder-references; results in the live view, the "
        "dashboard's Elo graph, the summary and DATA_DIR/ladder); 0 = none",
        type=int,
    )
    opt(
        "--ladder-every-minutes",
        "the ladder's budget: rate the newest release only when it was made at least this "
        "many minutes after the last one rated (the first release is rated, those between "
        "skipped); 0 = every release",
        type=float,
    )
    opt(
        "--ladder-references",
        "the ladder's references, comma-separated: random, first (the run's first model), "
        "gnugo-lL (GNU Go level L, left out when GNU Go is not installed; random play then "
        "if nothing is left)",
    )
    opt("--ladder-visits", "visits per move of the models in the ladder (0 = --visits)", type=int)
    opt(
        "--ladder-nice",
        "how much lower the ladder's OS priority is (0-19; its engines inherit it), so that "
        "self-play keeps the cores",
        type=int,
    )
    opt(
        "--final-ladder-games",
        "after the run, rate the newest release with kgrpc-eval ladder against random play "
        "and GNU Go level 1 (when installed), this many games each, at --eval-visits; report "
        "in DATA_DIR/final-ladder; 0 = none",
        type=int,
    )
    opt("--final-ladder-parallel", "games at once in the final ladder", type=int)
    opt(
        "--int8",
        "also export and publish every candidate in int8 (calibrated on training positions, "
        "parity-checked), which the CPU workers then play with: on, off, or auto (on where "
        "the CPU has an int8 dot product: VNNI, AMX, Arm dotprod)",
        choices=["auto", "on", "off"],
    )
    opt(
        "--max-minutes",
        "with --generations N: give up after this long; with --generations 0: train this "
        "long (the final evaluation comes after)",
        type=float,
    )
    for flag, what, example in (
        ("--train", "kgrpc-train run setting (trainer/config.py name", "samples_per_row=8"),
        ("--coord", "coordinator setting (kgrpc/coordinator/config.py name", "komi=6.5"),
    ):
        env_flag(
            p,
            flag,
            group=group_of[flag],
            action="append",
            type=_key_value,
            metavar="KEY=VALUE",
            default=argparse.SUPPRESS,
            show="none",
            help=f"a further {what}, e.g. {example}); repeatable (the variable: a "
            "comma-separated list)",
        )
    opt(
        "--keep",
        "keep what an earlier run left in the data dir (off: empty it first)",
        dest="fresh",
        action="store_false",
    )
    opt(
        "--tls",
        "run every connection over TLS: a private CA and a server certificate for 127.0.0.1 "
        "are made in DATA_DIR/tls with the openssl command (off: plaintext on loopback)",
        action="store_true",
    )
    opt(
        "--view",
        "live: redraw a table; plain: a status line every 15 s; auto: live on a terminal",
        choices=["auto", "live", "plain"],
    )
    opt(
        "--http-listen",
        "the coordinator's dashboard and /metrics (any free port on 127.0.0.1, printed at "
        "start; '' = off)",
        metavar="ADDR",
    )
    return p


def resolve(given: dict[str, Any]) -> ClusterConfig:
    """The config of the flags ``given`` (argparse dests): defaults, the profile, the flags."""
    cfg = ClusterConfig()
    name = given.get("profile", "")
    if name:
        prof = PROFILES[name]
        for key, value in prof.cluster.items():
            setattr(cfg, key, value)
        cfg.trainer.update(prof.trainer)
        cfg.coordinator.update(prof.coordinator)
        cfg.profile = name
    names = {f.name for f in fields(ClusterConfig)} - {"trainer", "coordinator", "profile"}
    for key, value in given.items():
        if key in names:
            setattr(cfg, key, value)
    cfg.trainer.update(given.get("train") or [])
    cfg.coordinator.update(given.get("coord") or [])
    return cfg


def parse_args(argv: list[str] | None) -> ClusterConfig:
    p = build_parser()
    cfg = resolve(vars(p.parse_args(argv)))
    try:
        cfg.check()
    except ValueError as exc:
        p.error(str(exc))
    return cfg
