"""``python -m kgrpc.programs.gtp`` as a subprocess over pipes, as GUIs and match tools drive it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kgrpc.go.board import BLACK, Board
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.sgf import board_to_sgf


class Gtp:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kgrpc.programs.gtp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def send(self, command: str) -> tuple[bool, str]:
        """(success, text) of one command; reads up to the blank line that ends the answer."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        lines = []
        while True:
            line = self.proc.stdout.readline()
            assert line, f"engine closed stdout after {command!r}"
            if line == "\n" and lines:
                break
            lines.append(line.rstrip("\n"))
        first = lines[0]
        assert first[0] in "=?", first
        return first[0] == "=", "\n".join([first[1:], *lines[1:]])

    def ok(self, command: str) -> str:
        success, text = self.send(command)
        assert success, f"{command!r} failed: {text}"
        return text.strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
        self.proc.wait(timeout=10)


@pytest.fixture
def gtp():
    engine = Gtp("--seed", "3")
    yield engine
    engine.close()


def test_commands_ids_and_errors(gtp):
    assert gtp.ok("protocol_version") == "2"
    assert gtp.ok("name") == "kgrpc"
    listed = gtp.ok("list_commands").split("\n")
    for c in (
        "protocol_version",
        "name",
        "version",
        "known_command",
        "list_commands",
        "boardsize",
        "clear_board",
        "komi",
        "play",
        "genmove",
        "undo",
        "showboard",
        "final_score",
        "quit",
        "loadsgf",
    ):
        assert c in listed
    assert gtp.ok("known_command genmove") == "true"
    assert gtp.ok("known_command frobnicate") == "false"
    assert gtp.send("17 frobnicate") == (False, "17 unknown command")
    assert gtp.send("42 boardsize 9") == (True, "42")
    assert gtp.send("boardsize 40") == (False, " unacceptable size")
    assert gtp.ok("komi 6.5") == ""
    assert gtp.send("play b E5") == (True, "")
    assert gtp.send("5 play w E5") == (False, "5 illegal move")
    assert gtp.send("play w Z9")[0] is False
    assert gtp.send("komi abc")[0] is False


def test_illegal_suicide_and_ko_answer_errors(gtp):
    gtp.ok("boardsize 5")
    # White on A5 next to black B5 and A4 would be suicide.
    gtp.ok("play b B5")
    gtp.ok("play b A4")
    assert gtp.send("play w A5") == (False, " illegal move")
    # Out-of-turn play is accepted (black played twice above).
    assert "X" in gtp.ok("showboard")


def test_genmove_never_fills_own_eye_and_final_score(gtp):
    gtp.ok("boardsize 5")
    gtp.ok("komi 0.5")
    # Black owns the left side with two eyes at A5 and A3; white the right side.
    for v in ("B5", "B4", "A4", "B3", "B2", "A2", "B1", "C5", "C4", "C3", "C2", "C1"):
        colour = "b" if v[0] in "AB" else "w"
        gtp.ok(f"play {colour} {v}")
    seen = set()
    for _ in range(20):
        move = gtp.ok("genmove b")
        seen.add(move)
        assert move.upper() not in ("A5", "A3", "A1"), "random player filled its own eye"
        gtp.ok("undo")
    assert seen <= {
        "A1",
        "PASS",
        "pass",
        "D5",
        "D4",
        "D3",
        "D2",
        "D1",
        "E5",
        "E4",
        "E3",
        "E2",
        "E1",
    }
    # Black: 7 stones + eyes A5 A3 A1 = 10; white: 5 stones + the D and E columns = 15.
    assert gtp.ok("final_score") == "W+5.5"
    gtp.ok("clear_board")
    assert gtp.ok("final_score") == "W+0.5"
    gtp.ok("komi 0")
    assert gtp.ok("final_score") == "0"
    gtp.ok("play b C3")
    assert gtp.ok("final_score") == "B+25"


def test_random_game_to_the_end_and_undo(gtp):
    gtp.ok("boardsize 7")
    board = Board(7)
    colour = "b"
    passes = 0
    for _ in range(400):
        move = gtp.ok(f"genmove {colour}")
        board.play(from_gtp(move, 7))
        passes = passes + 1 if move.lower() == "pass" else 0
        if passes == 2:
            break
        colour = "w" if colour == "b" else "b"
    assert passes == 2
    for p in range(49):
        # Every point is a stone or an eye: random players pass only when nothing else is left.
        assert board.stones[p] != 0 or any(board.is_own_eye(p, c) for c in (1, -1))
    shown = gtp.ok("showboard")
    assert shown.count("\n") >= 9
    gtp.ok("undo")
    gtp.ok("undo")
    assert gtp.send("2 clear_board") == (True, "2")
    assert gtp.send("undo") == (False, " cannot undo")


def test_loadsgf(gtp, tmp_path: Path):
    b = Board(9)
    for v in ("E5", "C3", "G7", "D4"):
        b.play(from_gtp(v, 9))
    f = tmp_path / "g.sgf"
    f.write_text(board_to_sgf(b))
    assert gtp.ok(f"loadsgf {f}") == "black"
    board_text = gtp.ok("showboard")
    assert "black to play" in board_text
    assert gtp.send("play w D4") == (False, " illegal move")
    assert gtp.ok(f"loadsgf {f} 3") == "black"  # position before move 3: two moves played
    gtp.ok("play b D4")
    assert gtp.send(f"loadsgf {tmp_path / 'missing.sgf'}") == (False, " cannot load file")
    assert to_gtp(from_gtp("D4", 9), 9) == "D4" and BLACK == 1


@pytest.mark.slow
def test_bad_options_are_clear_errors():
    out = subprocess.run(
        [sys.executable, "-m", "kgrpc.programs.gtp", "--model", "x.onnx"],
        input="quit\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "x.onnx" in out.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "kgrpc.programs.gtp", "--rules", "ing"],
        input="quit\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "known presets" in bad.stderr


@pytest.mark.slow
def test_model_player_searches_and_plays_a_game_with_the_random_engine(tmp_path):
    """`--model FILE.onnx`: the MCTS player answers genmove with legal moves, as in a match tool."""
    pytest.importorskip("onnxruntime")
    from trainer.export import init_model

    model = tmp_path / "tiny.onnx"
    init_model(7, 1, 8, model)
    ours = Gtp("--model", str(model), "--visits", "8", "--size", "7", "--seed", "1")
    rand = Gtp("--seed", "2", "--size", "7")
    board = Board(7)
    try:
        for engine in (ours, rand):
            engine.ok("boardsize 7")
            engine.ok("clear_board")
        players = {BLACK: (ours, rand), -BLACK: (rand, ours)}
        for _ in range(30):
            mover, other = players[board.to_play]
            colour = "b" if board.to_play == BLACK else "w"
            vertex = mover.ok(f"genmove {colour}")
            move = board.pass_move if vertex.lower() == "pass" else from_gtp(vertex, 7)
            assert board.is_legal(move), f"illegal genmove answer {vertex}"
            board.play(move)
            other.ok(f"play {colour} {vertex}")
            if board.is_over():
                break
        assert ours.ok("final_score") == rand.ok("final_score")
    finally:
        ours.close()
        rand.close()


@pytest.mark.slow
def test_model_player_missing_file_is_a_clear_error(tmp_path):
    cmd = [sys.executable, "-m", "kgrpc.programs.gtp", "--model", str(tmp_path / "nope.onnx")]
    proc = subprocess.run(cmd, input="quit\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "nope.onnx" in proc.stderr


def test_score_utility_factor_reaches_the_search_and_is_checked(tmp_path):
    pytest.importorskip("onnxruntime")
    from kgrpc.programs.gtp import build_parser, load_model_player
    from trainer.export import init_model

    model = tmp_path / "tiny.onnx"
    init_model(7, 1, 8, model)
    args = build_parser().parse_args(["--model", str(model), "--score-utility-factor", "0.5"])
    player = load_model_player(str(model), args)
    assert player.mcts.config.score_utility_factor == 0.5
    plain = load_model_player(str(model), build_parser().parse_args(["--model", str(model)]))
    assert plain.mcts.config.score_utility_factor == 0.0
    cmd = [sys.executable, "-m", "kgrpc.programs.gtp", "--score-utility-factor", "-1"]
    proc = subprocess.run(cmd, input="quit\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--score-utility-factor" in proc.stderr and "[0, 10]" in proc.stderr


def test_gumbel_flags_reach_the_search_and_genmove_plays(tmp_path):
    pytest.importorskip("onnxruntime")
    from kgrpc.programs.gtp import build_parser, load_model_player
    from trainer.export import init_model

    model = tmp_path / "tiny.onnx"
    init_model(7, 1, 8, model)
    args = ["--model", str(model), "--gumbel", "--gumbel-considered", "4", "--visits", "8"]
    player = load_model_player(str(model), build_parser().parse_args(args))
    assert player.mcts.config.gumbel and player.mcts.config.gumbel_considered == 4
    plain = load_model_player(str(model), build_parser().parse_args(["--model", str(model)]))
    assert not plain.mcts.config.gumbel
    cmd = [sys.executable, "-m", "kgrpc.programs.gtp", *args, "--size", "7"]
    proc = subprocess.run(
        cmd, input="genmove b\ngenmove w\nquit\n", capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    replies = [line for line in proc.stdout.splitlines() if line.startswith("=")]
    assert len(replies) >= 2 and all(r.strip() != "=" for r in replies[:2]), proc.stdout
    bad = [sys.executable, "-m", "kgrpc.programs.gtp", "--gumbel", "--gumbel-considered", "0"]
    proc = subprocess.run(bad, input="quit\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "gumbel_considered" in proc.stderr
