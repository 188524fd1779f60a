"""kgrpc-eval's match runner with real engine processes: kgrpc-gtp, GNU Go, broken engines."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from sgfmill import sgf as sgfmill_sgf

from kgrpc.go.board import Board
from kgrpc.go.coords import from_gtp
from kgrpc.programs.eval.engine import (
    EngineDied,
    EngineFailure,
    EngineTimeout,
    GtpProcess,
    gtp_command,
)
from kgrpc.programs.eval.match import EngineSpec, MatchSettings, run_match
from kgrpc.programs.eval.referee import GnuGoReferee, PlayoutReferee, find_gnugo

GNUGO = find_gnugo()
FAULTY = str(Path(__file__).with_name("faulty_gtp_engine.py"))
needs_gnugo = pytest.mark.skipif(
    GNUGO is None, reason="GNU Go not installed (apt-get install gnugo): GNU Go tests skipped"
)


def random_engine(name: str, seed: int) -> EngineSpec:
    return EngineSpec(name, gtp_command("--model", "none", "--seed", str(seed)))


def replay_with_sgfmill(path: Path) -> tuple[Board, str, str, str]:
    """(final board, PB, PW, RE) of an SGF file read by sgfmill, an independent parser."""
    game = sgfmill_sgf.Sgf_game.from_bytes(path.read_bytes())
    root = game.get_root()
    size = game.get_size()
    board = Board(size, komi=game.get_komi())
    for node in game.get_main_sequence()[1:]:
        colour, point = node.get_move()
        if colour is None:
            continue
        if point is None:
            board.play(board.pass_move)
        else:
            row, col = point  # sgfmill: row 0 is the bottom
            board.play((size - 1 - row) * size + col)
    return board, root.get("PB"), root.get("PW"), root.get("RE")


@pytest.mark.slow
@needs_gnugo
async def test_random_against_gnugo_counts_sgf_and_dead_stones(tmp_path: Path):
    settings = MatchSettings(games=4, size=7, komi=7.5, parallel=2)
    random_play = random_engine("random", 11)
    gnugo = EngineSpec("gnugo-l1", [GNUGO, "--mode", "gtp", "--level", "1", "--chinese-rules"])
    referee = GnuGoReferee(GNUGO)
    seen = []
    try:
        match = await run_match(
            random_play,
            gnugo,
            settings,
            referee,
            tmp_path,
            on_game=lambda g, m: seen.append(len(m.games)),
        )
    finally:
        await referee.close()
    assert seen == [1, 2, 3, 4]
    wins, losses, draws = match.counts()
    assert wins + losses + draws == 4
    # GNU Go crushes random play on 7x7.
    assert losses >= 3
    # The counts follow from the SGF files, read back by sgfmill.
    from_files = {"random": 0, "gnugo-l1": 0, "draw": 0}
    playouts = PlayoutReferee()
    for g in match.games:
        board, black, white, result = replay_with_sgfmill(tmp_path / g.sgf)
        assert (black, white) == (
            (random_play.name, gnugo.name) if g.index % 2 == 0 else (gnugo.name, random_play.name)
        )
        assert result == g.result and g.reason == "score" and g.referee == "gnugo"
        winner = {"B": black, "W": white}.get(result[0], "draw")
        from_files[winner] += 1
        # The final positions hold dead stones; our own judgement agrees with GNU Go's.
        mine = await playouts.judge(board)
        assert [from_gtp(v, 7) for v in g.dead] == list(mine.dead)
        assert mine.score == g.score
    assert from_files == {"random": wins, "gnugo-l1": losses, "draw": draws}
    assert any(g.dead for g in match.games), "expected dead stones at the end of some game"
    assert (tmp_path / "games.csv").read_text().count("\n") == 5
    summary = (tmp_path / "summary.json").read_text()
    assert '"losses": ' + str(losses) in summary


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "expect"),
    [
        ("crash", "exited with code 3"),
        ("error", "answered '? out of ideas'"),
        ("hang", "no answer to 'genmove"),
        ("illegal", "played the illegal move"),
        ("garbage", "answered 'banana' to genmove"),
    ],
)
async def test_a_failing_engine_forfeits_with_the_reason(tmp_path: Path, mode: str, expect: str):
    settings = MatchSettings(games=2, size=5, komi=0.5, parallel=2, move_timeout=3.0)
    good = random_engine("random", 5)
    bad = EngineSpec("faulty", [sys.executable, FAULTY, mode])
    started = time.monotonic()
    match = await run_match(good, bad, settings, PlayoutReferee(), tmp_path)
    assert time.monotonic() - started < 60
    assert match.counts() == (2, 0, 0)
    for g in match.games:
        assert g.reason == "forfeit"
        assert g.winner_name() == "random"
        assert g.detail.startswith("faulty (")
        assert expect in g.detail, g.detail
        if mode == "crash":
            assert "segmentation fault (simulated)" in g.detail
        _, _, _, result = replay_with_sgfmill(tmp_path / g.sgf)
        assert result.endswith("+F")


@pytest.mark.slow
async def test_engine_client_reports_failures_as_errors():
    engine = GtpProcess(gtp_command("--model", "none"), "kgrpc")
    try:
        assert await engine.send("name", 60) == "kgrpc"
        with pytest.raises(EngineFailure, match="unknown command"):
            await engine.send("frobnicate", 10)
        assert await engine.send("boardsize 5", 10) == ""
    finally:
        await engine.close()
    assert engine.proc is not None and engine.proc.returncode == 0
    hang = GtpProcess([sys.executable, FAULTY, "hang"])
    with pytest.raises(EngineTimeout):
        await hang.send("genmove b", 0.5)
    await hang.close()
    missing = GtpProcess(["/nonexistent/engine"])
    with pytest.raises(EngineDied, match="cannot start"):
        await missing.send("name", 5)


@pytest.mark.slow
def test_cli_match_between_two_random_engines(tmp_path: Path):
    engine = " ".join(gtp_command("--model", "none"))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kgrpc.programs.eval",
            "match",
            "--a",
            engine,
            "--b",
            engine,
            "--games",
            "2",
            "--size",
            "5",
            "--komi",
            "0.5",
            "--referee",
            "playouts",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "kgrpc-a vs kgrpc-b: 2 games, 5x5, komi 0.5" in out.stdout
    assert "W-L-D" in out.stdout and "Wilson 95%" in out.stdout and "Elo" in out.stdout
    assert "[2/2]" in out.stderr
    assert sorted(p.name for p in (tmp_path / "games").iterdir()) == [
        "game-0000.sgf",
        "game-0001.sgf",
    ]
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kgrpc.programs.eval",
            "match",
            "--a",
            "/nonexistent/engine",
            "--b",
            engine,
            "--games",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2
    assert "engine A (/nonexistent/engine): cannot start" in bad.stderr


@pytest.mark.slow
def test_deterministic_engines_repeat_a_game_and_the_match_says_so(tmp_path: Path):
    # Two random players with the same seed: A as black plays the same game every time, and
    # with the colours swapped the moves are the same too, but that is another game (B wins
    # what A won), so 3 games hold 2 distinct ones.
    engine = " ".join(gtp_command("--model", "none", "--seed", "7"))
    args = ["--a", engine, "--b", engine, "--games", "3", "--size", "5", "--komi", "0.5"]
    out = subprocess.run(
        [sys.executable, "-m", "kgrpc.programs.eval", "match", *args, "--referee", "playouts"]
        + ["--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "  2 of 3 games distinct move sequences" in out.stdout.splitlines()
    import csv
    import json

    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["summary"]["distinct_games"] == 2
    digests = [g["sequence"] for g in data["games"]]
    assert digests[0] == digests[2] and digests[0] != digests[1]
    assert all(len(d) == 64 for d in digests)
    moves = [
        [n.get_move() for n in sgfmill_sgf.Sgf_game.from_bytes(p.read_bytes()).get_main_sequence()]
        for p in sorted((tmp_path / "games").glob("*.sgf"))
    ]
    assert moves[0] == moves[1] == moves[2]  # the same moves: only the colours tell 0 from 1
    with open(tmp_path / "games.csv", newline="") as f:
        assert [row["sequence"] for row in csv.DictReader(f)] == digests
