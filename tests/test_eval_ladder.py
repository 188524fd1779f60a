"""kgrpc-eval ladder on a directory of two tiny real models: CSV, Markdown, PNG, SGF files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sgfmill import sgf as sgfmill_sgf

from kgrpc import elo
from kgrpc.programs.eval.ladder import LadderRecord, discover_models
from kgrpc.programs.eval.report import read_ladder_csv

pytest.importorskip("onnxruntime")
pytest.importorskip("matplotlib")

FIRST = "kg-b1c8-s0-d0"
SECOND = "kg-b1c8-s120-d6000"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    from trainer.export import init_model

    folder = tmp_path_factory.mktemp("run") / "models"
    for seed, name in enumerate((SECOND, FIRST)):  # file order is not training order
        init_model((5, 9), 1, 8, folder / f"{name}.onnx", name=name, seed=seed)
    (folder / "notes.txt").write_text("not a model")
    return folder


def run_ladder(models: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kgrpc.programs.eval", "ladder", "--models", str(models),
         "--games", "2",
         "--size", "5", "--komi", "0.5", "--visits", "4", "--parallel", "2",
         "--gnugo-levels", "", "--referee", "playouts", "--out", str(out)],
        capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_ladder_writes_csv_report_plot_and_games(models: Path, tmp_path: Path):
    out = tmp_path / "ladder"
    proc = run_ladder(models, out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(out / f"ladder.{x}") for x in ("csv", "md", "png")]
    records = read_ladder_csv(out / "ladder.csv")
    pairs = [(r.model, r.opponent) for r in records]
    assert pairs == [(FIRST, "random"), (SECOND, "random"), (SECOND, "first")]
    for r in records:
        assert r.games == r.wins + r.losses + r.draws == 2
        est = elo.elo_interval(r.wins, r.losses, r.draws)
        assert (r.elo, r.win_rate) == (pytest.approx(est.elo, abs=1e-3), est.rate)
        assert r.elo_low <= r.elo <= r.elo_high and r.win_low <= r.win_rate <= r.win_high
        assert r.visits == 4 and r.selfplay_games is None
        match_dir = out / "matches" / f"{r.model}__vs__{r.opponent}"
        sgfs = sorted((match_dir / "games").glob("*.sgf"))
        assert len(sgfs) == 2
        results = []
        for path in sgfs:
            game = sgfmill_sgf.Sgf_game.from_bytes(path.read_bytes())
            assert game.get_size() == 5
            players = {game.get_player_name("b"), game.get_player_name("w")}
            assert players == {r.model, r.opponent}
            winner = game.get_winner()
            results.append(None if winner is None else game.get_player_name(winner))
        assert results.count(r.model) == r.wins and results.count(None) == r.draws
    steps = {r.model: r.training_steps for r in records}
    assert steps == {FIRST: 0, SECOND: 120}
    assert {r.model: r.training_rows for r in records} == {FIRST: 0, SECOND: 6000}
    report = (out / "ladder.md").read_text()
    assert "| model | steps | rows | self-play games | wall (h:mm) | random | first |" in report
    assert f"| {SECOND} | 120 | 6000 |" in report
    png = (out / "ladder.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    import matplotlib.image

    height, width = matplotlib.image.imread(str(out / "ladder.png")).shape[:2]
    assert width > height > 100
    # Run again: every match is read back, none replayed.
    again = run_ladder(models, out)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("(stored)") == 3 and "[1/2]" not in again.stderr
    assert read_ladder_csv(out / "ladder.csv") == records


def test_records_round_trip_through_csv(tmp_path: Path):
    from kgrpc.programs.eval.report import ladder_csv

    rec = LadderRecord("kg-b1c8-s5-d9", "gnugo-l1", 4, 0, 4, 0, 0.0, 0.0, 0.49, -338.0,
                       float("-inf"), -7.0, 5, 9, None, 12.5, 100)
    path = tmp_path / "ladder.csv"
    path.write_text(ladder_csv([rec]))
    assert read_ladder_csv(path) == [rec]
    path.write_text("model,elo\nx,1\n")
    with pytest.raises(ValueError, match="not a ladder CSV"):
        read_ladder_csv(path)


def test_models_take_time_and_games_from_the_coordinator_index(models: Path, tmp_path: Path):
    from kgrpc.coordinator.db import connect

    data_dir = tmp_path / "data"
    (data_dir / "models").mkdir(parents=True)
    for f in models.glob("*.onnx"):
        (data_dir / "models" / f.name).write_bytes(f.read_bytes())
    con = connect(data_dir)
    for name, created in ((FIRST, 1_000_000), (SECOND, 4_600_000)):
        con.execute("INSERT INTO models (name, sha256, size_bytes, blocks, channels, "
                    "training_steps, training_rows, feature_version, status, created_ms, run) "
                    "VALUES (?, '', 0, 1, 8, 0, 0, 1, 'released', ?, 'r')", (name, created))
    for i, accepted in enumerate((500_000, 900_000, 2_000_000, 4_000_000, 9_000_000)):
        con.execute("INSERT INTO games (game_id, worker_id, run, board_size, positions, "
                    "accepted_ms) VALUES (?, 'w', 'r', 5, 10, ?)", (f"g{i}", accepted))
    con.commit()
    con.close()
    found = discover_models(data_dir / "models")
    assert [m.name for m in found] == [FIRST, SECOND]
    assert [m.selfplay_games for m in found] == [2, 4]
    assert found[1].created - found[0].created == pytest.approx(3600.0)
    # Without an index: file times, unknown game counts.
    plain = discover_models(models)
    assert [m.selfplay_games for m in plain] == [None, None]
    with pytest.raises(ValueError, match="no .onnx models"):
        discover_models(tmp_path)
