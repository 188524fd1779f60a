"""kgrpc-cluster profiles: learn9 resolves to its documented settings, flags override it, and
the settings reach the coordinator's TOML and the trainer's command line as they were meant."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kgrpc.coordinator.config import SETTINGS as COORDINATOR
from kgrpc.programs.cluster.final_ladder import FinalLadder, ladder_args
from kgrpc.programs.cluster.options import ClusterConfig, parse_args
from kgrpc.programs.cluster.profiles import LEARN9, LEARN9_GUMBEL, LEARN9_SEARCH
from kgrpc.programs.cluster.run import Cluster, trainer_flags
from trainer import config as trainer_config


def test_no_profile_keeps_the_demo_defaults() -> None:
    cfg = parse_args([])
    assert cfg == ClusterConfig()
    assert (cfg.blocks, cfg.channels, cfg.generations, cfg.gating) == (2, 32, 3, True)
    assert cfg.worker_inference == "server" and not cfg.time_bounded
    assert cfg.trainer == {} and cfg.coordinator == {}
    assert cfg.ladder_games == 0  # make demo runs no ladder


def test_learn9_resolves_to_its_documented_settings() -> None:
    cfg = parse_args(["--profile", "learn9"])
    assert cfg.profile == "learn9"
    assert (cfg.board_size, cfg.blocks, cfg.channels, cfg.visits) == (9, 4, 32, 32)
    assert (cfg.workers, cfg.worker_inference, cfg.parallel_games) == (1, "local", 32)
    assert cfg.time_bounded and cfg.max_minutes == 120.0 and cfg.gating is False
    assert (cfg.final_ladder_games, cfg.evaluation_visits) == (40, 400)
    trainer = cfg.trainer_settings()
    assert trainer["samples_per_row"] == 8.0 and trainer["ema_samples"] == 25_000
    assert (trainer["window_min_rows"], trainer["lr_warmup_samples"]) == (25_000, 20_000)
    assert (trainer["blocks"], trainer["generations"], trainer["lr"]) == (4, 0, 1e-3)
    assert (trainer["autocast"], trainer["channels_last"]) == ("auto", True)
    coord = cfg.coordinator_settings()
    assert coord["gating_enabled"] is False
    assert (coord["full_search_prob"], coord["cheap_visits"]) == (0.25, 8)
    assert coord["gumbel"] is True and coord["gumbel_considered"] == 16
    assert {k: coord[k] for k in LEARN9_GUMBEL} == dict(LEARN9_GUMBEL)
    assert coord["curriculum"] == "0:9:32"
    for key, value in LEARN9.cluster.items():
        assert getattr(cfg, key) == value, key
    # The run prints every setting it uses.
    text = "\n".join(cfg.describe())
    assert text.startswith("profile learn9: ")
    assert "samples_per_row=8.0" in text and "gating_enabled=false" in text
    assert "worker_inference=local" in text and "eval_visits=400" in text


def test_explicit_flags_override_the_profile() -> None:
    cfg = parse_args(
        [
            "--profile",
            "learn9",
            "--blocks",
            "6",
            "--channels",
            "64",
            "--gating",
            "--max-minutes",
            "8",
            "--final-ladder-games",
            "2",
            "--train",
            "samples_per_row=4",
            "--train",
            "lr-schedule=cosine",
            "--train",
            "lr_decay_samples=100000",
            "--coord",
            "cheap_visits=16",
        ]
    )
    assert (cfg.blocks, cfg.channels, cfg.gating, cfg.max_minutes) == (6, 64, True, 8.0)
    assert cfg.final_ladder_games == 2 and cfg.visits == 32  # the rest stays the profile's
    assert cfg.trainer["samples_per_row"] == "4" and cfg.trainer["ema_samples"] == 25_000
    assert cfg.trainer["lr_schedule"] == "cosine"
    assert cfg.coordinator == {
        **LEARN9_SEARCH,
        **LEARN9_GUMBEL,
        "full_search_prob": 0.25,
        "cheap_visits": "16",
    }
    assert cfg.coordinator_settings()["gating_enabled"] is True
    assert parse_args(["--profile", "learn9", "--no-gating"]).gating is False
    assert parse_args(["--gating-games", "4", "--no-gating"]).gating is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--train", "sample_per_row=4"], "did you mean 'samples_per_row'"),
        (["--train", "lr=0.1"], "--train lr: set by the run itself (use --learning-rate)"),
        (["--train", "lr_schedule=step"], "needs lr_decay_samples"),
        (["--train", "samples_per_row"], "expected KEY=VALUE"),
        (["--coord", "gating_enabled=false"], "use --gating / --no-gating"),
        (["--coord", "full_search_prob=lots"], "full_search_prob"),
        (["--profile", "learn19"], "invalid choice"),
        (["--generations", "-1"], "--generations >= 0"),
        (["--ladder-references", "gnugo"], "'gnugo' is not random, first or gnugo-lL"),
        (["--ladder-games", "2", "--ladder-references", ""], "name at least one reference"),
        (["--ladder-every-minutes", "-1"], "--ladder-every-minutes must be >= 0"),
        (["--ladder-nice", "20"], "--ladder-nice must be between 0 and 19"),
        (["--spare-workers", "-1"], "--spare-workers must be >= 0"),
        (["--spare-workers", "1"], "--spare-workers needs --worker-inference local"),
    ],
)
def test_bad_settings_are_refused_before_anything_starts(argv, message, capsys) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_spare_workers_are_refused_without_sched_idle(capsys, monkeypatch) -> None:
    """Spare workers run at Linux's SCHED_IDLE; where the OS has no such policy the run is
    refused before anything starts, not left to fail in each worker."""
    import os

    monkeypatch.delattr(os, "SCHED_IDLE", raising=False)
    with pytest.raises(SystemExit):
        parse_args(["--spare-workers", "1", "--worker-inference", "local"])
    assert "--spare-workers needs Linux: they run at its SCHED_IDLE policy" in (
        capsys.readouterr().err
    )


def test_help_lists_the_profiles(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no line breaks inside what is looked for
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    assert "learn9: 9x9 from random weights on a 2-core CPU" in out
    assert "samples_per_row=8.0" in out and "--no-gating" in out


def test_settings_reach_the_coordinator_and_the_trainer(tmp_path: Path) -> None:
    cfg = parse_args(
        ["--profile", "learn9", "--data-dir", str(tmp_path), "--coord", "cheap_visits=16"]
    )
    path = Cluster(cfg)._write_coordinator_config()
    coord = COORDINATOR.load(toml_path=path)
    coord.check()
    assert coord.gating_enabled is False and coord.cheap_visits == 16
    assert coord.full_search_prob == 0.25 and coord.curriculum[0].visits == 32
    assert coord.gumbel is True

    parser = argparse.ArgumentParser()
    trainer_config.add_arguments(parser)
    args = parser.parse_args(trainer_flags({**cfg.trainer_settings(), "symmetries": False}))
    train = trainer_config.SETTINGS.from_args(args, env={}).validate()
    assert (train.samples_per_row, train.ema_samples, train.window_min_rows) == (
        8.0,
        25_000,
        25_000,
    )
    assert (train.blocks, train.channels, train.generations, train.lr) == (4, 32, 0, 1e-3)
    assert train.lr_schedule == "constant" and train.symmetries is False


def test_final_ladder_command_and_report(tmp_path: Path) -> None:
    cfg = parse_args(["--profile", "learn9"])
    args = ladder_args(tmp_path / "model", cfg, tmp_path / "out", gnugo=True)
    assert args[:3] == ["-m", "kgrpc.programs.eval", "ladder"]
    pairs = dict(zip(args[3::2], args[4::2], strict=False))
    assert pairs["--games"] == "40" and pairs["--visits"] == "400"
    assert pairs["--gnugo-levels"] == "1" and "--no-first" in args
    from kgrpc.programs.eval.cli import build_parser

    parsed = build_parser().parse_args(args[2:])  # kgrpc-eval accepts exactly this
    assert (parsed.games, parsed.visits, parsed.no_first) == (40, 400, True)
    final = FinalLadder("kg-b4c32-s8-d100", tmp_path / "out", gnugo=True)
    (tmp_path / "out").mkdir()
    final.report.write_text("# Rating ladder\n\nintro\n\n| model |\n![plot](ladder.png)\n")
    assert final.results() == ["intro", "", "| model |"]


def test_summary_shows_the_final_ladder_without_other_evaluation(tmp_path: Path) -> None:
    import json

    from kgrpc.programs.cluster.summary import summary_text, write_summary_json
    from kgrpc.v1 import coordinator_pb2

    out = tmp_path / "final-ladder"
    out.mkdir()
    (out / "ladder.md").write_text(
        "# Rating ladder\n\n| model | gnugo-l1 |\n\n- gnugo-l1: m, win rate 0.0% [0.0%, 39.0%]\n"
    )
    final = FinalLadder("kg-b4c32-s156-d2511", out, gnugo=False)
    stats = coordinator_pb2.Stats(games_accepted=3)
    text = summary_text(stats, {}, tmp_path, tmp_path / "logs", 60.0, final=final)
    assert "final ladder of kg-b4c32-s156-d2511:" in text
    assert "- gnugo-l1: m, win rate 0.0% [0.0%, 39.0%]" in text
    assert "GNU Go is not installed" in text and "final evaluation of" not in text
    cfg = parse_args(["--profile", "learn9", "--data-dir", str(tmp_path)])
    write_summary_json(tmp_path, cfg, stats, {}, final)
    data = json.loads((tmp_path / "cluster-summary.json").read_text())
    assert data["final_ladder"]["model"] == "kg-b4c32-s156-d2511"
    assert data["config"]["trainer"]["samples_per_row"] == 8.0


def test_int8_follows_the_cpu_in_learn9_and_reaches_the_trainer(monkeypatch) -> None:
    from kgrpc import precision

    for fast in (True, False):
        monkeypatch.setattr(precision, "cpu_int8_fast", lambda cpuinfo=None, fast=fast: fast)
        cfg = parse_args(["--profile", "learn9"])
        assert cfg.int8 == "auto" and cfg.int8_enabled is fast
        trainer = cfg.trainer_settings()
        assert trainer.get("precisions") == ("fp32,int8" if fast else None)
        assert f"int8=auto ({'on' if fast else 'off'})" in "\n".join(cfg.describe())
    # Explicit: on and off whatever the CPU; an explicit --train precisions wins.
    assert parse_args(["--int8", "on"]).trainer_settings()["precisions"] == "fp32,int8"
    assert "precisions" not in parse_args(["--profile", "learn9", "--int8", "off"]).trainer
    chosen = parse_args(["--int8", "on", "--train", "precisions=fp32,fp16"])
    assert chosen.trainer_settings()["precisions"] == "fp32,fp16"
    assert parse_args([]).int8 == "off" and "precisions" not in parse_args([]).trainer_settings()


@pytest.mark.parametrize(
    ("text", "fast"),
    [
        ("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n", True),
        ("flags\t\t: fpu sse2 avx2 avx_vnni\n", True),
        ("flags\t\t: fpu sse2 avx2 avx512f\n", False),
        ("Features\t: fp asimd evtstrm asimddp\n", True),
        ("Features\t: fp asimd\n", False),
        ("", False),
    ],
)
def test_cpu_int8_fast_reads_the_cpu_flags(text: str, fast: bool) -> None:
    from kgrpc.precision import cpu_int8_fast

    assert cpu_int8_fast(text) is fast


def test_learn9_puct_is_learn9_with_puct_at_three_times_the_visits() -> None:
    cfg = parse_args(["--profile", "learn9-puct"])
    assert cfg.visits == 96 and cfg.int8 == "auto"
    coord = cfg.coordinator_settings()
    assert coord["cheap_visits"] == 24 and coord["curriculum"] == "0:9:96"
    assert "gumbel" not in coord and coord["forced_playouts_k"] == 2.0
    # The rest is learn9's.
    learn9 = parse_args(["--profile", "learn9"])
    assert cfg.trainer_settings() == learn9.trainer_settings()
    assert (cfg.blocks, cfg.max_minutes, cfg.final_ladder_games) == (4, 120.0, 40)


def test_learn9_rates_a_release_every_ten_minutes_against_gnugo_as_it_goes(
    tmp_path: Path,
) -> None:
    from kgrpc.programs.eval.cli import build_parser
    from kgrpc.programs.eval.referee import find_gnugo
    from kgrpc.programs.eval.remote import follow_args, playable_references

    for name in ("learn9", "learn9-puct"):
        cfg = parse_args(["--profile", name])
        assert (cfg.ladder_games, cfg.ladder_every_minutes) == (10, 10.0)
        assert (cfg.ladder_references, cfg.ladder_search_visits, cfg.ladder_nice) == (
            "gnugo-l1",
            32,
            10,
        )
        text = "\n".join(cfg.describe())  # the budget is in the run's settings line
        assert "ladder_games=10" in text and "ladder_every_minutes=10.0" in text
        assert "ladder_references=gnugo-l1" in text and "ladder_visits=32" in text
    # Flags override it; ladder_visits 0 is --visits (learn9-puct's 96, not the ladder's 32).
    cfg = parse_args(
        ["--profile", "learn9-puct", "--ladder-every-minutes", "0", "--ladder-visits", "0"]
    )
    assert cfg.ladder_every_minutes == 0.0 and cfg.ladder_search_visits == 96

    # What the cluster spawns is what kgrpc-eval takes: the budget, the references, the nice.
    cfg = parse_args(["--profile", "learn9"])
    refs, notes = playable_references(cfg.ladder_reference_list())
    gnugo = find_gnugo() is not None
    assert refs == (["gnugo-l1"] if gnugo else ["random"])
    assert bool(notes) is not gnugo  # without GNU Go: said, and random play instead
    args = follow_args("127.0.0.1:1", 10, 9, 7.5, 32, tmp_path, refs, 10.0, 10)
    parsed = build_parser().parse_args(args[2:])
    assert (parsed.follow, parsed.every_minutes, parsed.nice, parsed.visits) == (
        True,
        10.0,
        10,
        32,
    )
    assert parsed.no_first and parsed.no_random is gnugo
    assert parsed.gnugo_levels == ("1" if gnugo else "")
    # The default ladder (--ladder-games N alone) rates every release as before.
    default = build_parser().parse_args(follow_args("127.0.0.1:1", 2, 9, 7.5, 24, tmp_path)[2:])
    assert default.every_minutes == 0.0 and not default.no_random and not default.no_first
