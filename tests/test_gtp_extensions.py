"""The GTP commands GUIs and match tools send beyond the basics, against the real kgrpc-gtp.

time_settings / time_left, final_status_list, final_score with dead stones,
kgs-genmove_cleanup, kata-analyze / lz-analyze streaming, and a clean quit.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.programs.eval.engine import gtp_command
from kgrpc.programs.gtp import Clock

DEAD_STONES = [  # white B7 and F1 dead in black's area, black G7 dead in white's
    ". . X O . . . . .",
    ". . X O . . . . .",
    ". O X O . . X . .",
    ". . X O . . . . .",
    "X X X O . . . . .",
    ". . X O O O O O O",
    ". . X X X X X X X",
    ". . . . . . . . .",
    ". . . . . O . . .",
]
SEKI = [  # outer groups alive; C7-C6-C5-D5 and E7-E6-E5 in seki on D7 and D6
    ". O X . O X .",
    "O O X . O X X",
    ". O X X O X .",
    "O O O O X X X",
    ". O . O X . X",
    "O O O O X X X",
    ". O . O X . X",
]
CLEANUP = [  # black far ahead; white B6 is dead inside black's corner
    ". . X . . . .",
    ". O X . . . .",
    "X X X . . . .",
    ". . . . . . .",
    "X X X X X X X",
    "O O O O O O O",
    ". O . O . O .",
]


class Engine:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            gtp_command(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def write(self, line: str) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read_answer(self) -> tuple[bool, list[str]]:
        """(success, lines) of one answer, up to the blank line that ends it."""
        assert self.proc.stdout
        lines: list[str] = []
        while True:
            line = self.proc.stdout.readline()
            assert line, "engine closed stdout"
            if line == "\n" and lines:
                return lines[0][0] == "=", lines
            lines.append(line.rstrip("\n"))

    def send(self, command: str) -> tuple[bool, str]:
        self.write(command)
        ok, lines = self.read_answer()
        return ok, "\n".join([lines[0][1:], *lines[1:]]).strip()

    def ok(self, command: str) -> str:
        success, text = self.send(command)
        assert success, f"{command!r} failed: {text}"
        return text

    def setup(self, rows: list[str], komi: float) -> None:
        n = len(rows)
        self.ok(f"boardsize {n}")
        self.ok(f"komi {komi}")
        for r, row in enumerate(rows):
            for c, ch in enumerate(row.split()):
                if ch in "XO":
                    self.ok(f"play {'b' if ch == 'X' else 'w'} {to_gtp(r * n + c, n)}")

    def quit(self) -> str:
        """quit; returns stderr after checking a clean exit."""
        self.write("quit")
        out, err = self.proc.communicate(timeout=60)
        assert out.strip() == "="
        assert self.proc.returncode == 0, err
        return err


@pytest.fixture
def random_engine():
    engine = Engine("--model", "none", "--seed", "1")
    yield engine
    if engine.proc.poll() is None:
        engine.proc.kill()
        engine.proc.wait()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    from trainer.export import init_model

    path = tmp_path_factory.mktemp("models") / "tiny.onnx"
    init_model((5, 7, 9), 1, 8, path)
    return path


def test_new_commands_are_listed(random_engine):
    listed = random_engine.ok("list_commands").split("\n")
    for command in (
        "time_settings",
        "time_left",
        "final_status_list",
        "kgs-genmove_cleanup",
        "kata-analyze",
        "lz-analyze",
        "stop",
    ):
        assert command in listed
        assert random_engine.ok(f"known_command {command}") == "true"


def test_final_status_list_and_final_score_remove_dead_stones(random_engine):
    random_engine.setup(DEAD_STONES, komi=7.5)
    assert sorted(random_engine.ok("final_status_list dead").split()) == ["B7", "F1", "G7"]
    alive = random_engine.ok("final_status_list alive").split()
    stones = sum(row.count("X") + row.count("O") for row in DEAD_STONES)
    assert len(alive) == stones - 3 and "B7" not in alive and "C9" in alive
    assert random_engine.ok("final_status_list seki") == ""
    assert random_engine.ok("final_score") == "B+1.5"  # W+4.5 if every stone counted
    random_engine.setup(SEKI, komi=0)
    assert random_engine.ok("final_status_list dead") == ""
    assert sorted(random_engine.ok("final_status_list seki").split()) == [
        "C5",
        "C6",
        "C7",
        "D5",
        "E5",
        "E6",
        "E7",
    ]
    assert random_engine.ok("final_score") == "W+3"
    assert random_engine.send("final_status_list zombie") == (
        False,
        "final_status_list takes one of alive, dead, seki",
    )


def test_time_commands_validate_their_arguments(random_engine):
    assert random_engine.ok("time_settings 300 30 5") == ""
    assert random_engine.ok("time_left black 120.5 0") == ""
    assert random_engine.ok("time_left w 25 3") == ""
    for bad in (
        "time_settings 300 30",
        "time_settings -1 0 0",
        "time_settings a b c",
        "time_left black 10",
        "time_left red 10 0",
        "time_left b x 0",
        "time_left b 10 -1",
    ):
        assert random_engine.send(bad)[0] is False, bad
    # The random player is not slowed down by a clock.
    assert from_gtp(random_engine.ok("genmove b"), 19) <= 361


def test_clock_budgets():
    board = Board(9)
    clock = Clock()
    assert clock.budget(BLACK, board) is None  # no time_settings: no limit
    clock.set(0, 30, 0)  # byo-yomi time without stones: GTP's "no limit"
    assert clock.budget(BLACK, board) is None
    clock.set(0, 10, 5)  # canadian: 10 s for 5 stones
    assert clock.budget(BLACK, board) == pytest.approx(2 * 0.8 - 0.05)
    clock.set(90, 0, 0)  # absolute: 90 s, 81 empty points -> 40 of our moves left
    assert clock.budget(WHITE, board) == pytest.approx(90 / 40 * 0.8 - 0.05)
    clock.update(WHITE, 0.1, 0)  # nearly out of time: the smallest budget
    assert clock.budget(WHITE, board) == clock.min_budget
    clock.set(60, 10, 2)
    clock.update(BLACK, 8.0, 2)  # in byo-yomi: 8 s for 2 stones
    assert clock.budget(BLACK, board) == pytest.approx(4 * 0.8 - 0.05)
    clock.spent(BLACK, 3.0)  # our own bookkeeping until the next time_left
    assert clock.left[BLACK] == (5.0, 1)
    clock.spent(BLACK, 3.0)  # period over: a fresh one
    assert clock.left[BLACK] == (10.0, 2)


@pytest.mark.slow
def test_genmove_plays_within_the_time_given(model: Path):
    # 100000 visits would take minutes; a one-second byo-yomi must cut the search short.
    engine = Engine("--model", str(model), "--visits", "100000", "--size", "7")
    try:
        engine.ok("time_settings 0 1 1")
        engine.ok("genmove b")  # the first move also loads the model
        for colour in ("w", "b"):
            engine.ok(f"time_left {colour} 1 1")
            started = time.monotonic()
            move = engine.ok(f"genmove {colour}")
            assert time.monotonic() - started < 3.0
            assert from_gtp(move, 7) <= 49
        engine.quit()
    finally:
        if engine.proc.poll() is None:
            engine.proc.kill()


@pytest.mark.slow
def test_kgs_genmove_cleanup_captures_dead_stones_before_passing(model: Path):
    engine = Engine("--model", str(model), "--visits", "48", "--seed", "2")
    try:
        engine.setup(CLEANUP, komi=0.5)
        assert engine.ok("final_status_list dead") == "B6"
        engine.ok("play w pass")
        # Black is far ahead: a plain genmove ends the game by passing, dead stone and all.
        assert engine.ok("genmove b").lower() == "pass"
        engine.ok("undo")
        first = engine.ok("kgs-genmove_cleanup b")
        assert first in ("A6", "B7")  # a liberty of the dead stone
        engine.ok("play w pass")
        second = engine.ok("kgs-genmove_cleanup b")
        assert {first, second} == {"A6", "B7"}  # the capture
        board = engine.ok("showboard")
        assert "captures: black 1" in board
        assert engine.ok("final_status_list dead") == ""
        engine.ok("play w pass")
        assert engine.ok("kgs-genmove_cleanup b").lower() == "pass"
        # Black 14 stones + 21 points, white 10 stones + 4 eyes, komi 0.5.
        assert engine.ok("final_score") == "B+20.5"
        engine.quit()
    finally:
        if engine.proc.poll() is None:
            engine.proc.kill()


def parse_kata(line: str, size: int) -> tuple[list[dict[str, object]], list[float] | None]:
    """The move entries and the ownership of one kata-analyze line."""
    words = line.split()
    ownership = None
    if "ownership" in words:
        k = words.index("ownership")
        ownership = [float(x) for x in words[k + 1 :]]
        words = words[:k]
    entries: list[dict[str, object]] = []
    i = 0
    while i < len(words):
        assert words[i] == "info", line
        entry: dict[str, object] = {}
        i += 1
        while i < len(words) and words[i] != "info":
            key = words[i]
            if key == "pv":
                j = i + 1
                while j < len(words) and words[j] != "info":
                    j += 1
                entry["pv"] = words[i + 1 : j]
                i = j
            else:
                entry[key] = words[i + 1]
                i += 2
        entries.append(entry)
    return entries, ownership


@pytest.mark.slow
def test_kata_analyze_streams_until_the_next_command(model: Path):
    engine = Engine("--model", str(model), "--visits", "32", "--size", "7")
    try:
        engine.ok("boardsize 7")
        engine.ok("play b D4")
        engine.write("kata-analyze w interval 10 ownership true maxmoves 5")
        time.sleep(2.0)
        engine.write("name")
        ok, lines = engine.read_answer()
        assert ok and lines[0] == "="
        infos = lines[1:]
        assert len(infos) >= 2, "expected several lines over two seconds at 0.1 s"
        board = Board(7)
        board.play(from_gtp("D4", 7))
        totals = []
        for line in infos:
            entries, ownership = parse_kata(line, 7)
            assert 1 <= len(entries) <= 5
            assert ownership is not None and len(ownership) == 49
            assert all(-1.0 <= x <= 1.0 for x in ownership)
            for order, e in enumerate(entries):
                assert int(e["order"]) == order
                move = from_gtp(str(e["move"]), 7)
                assert board.is_legal(move)
                assert 0.0 <= float(e["winrate"]) <= 1.0
                assert 0.0 <= float(e["prior"]) <= 1.0
                float(e["scoreLead"])
                pv = e["pv"]
                assert isinstance(pv, list) and pv[0] == e["move"]
                trial = board.copy()
                for vertex in pv:  # a playable line
                    trial.play(from_gtp(vertex, 7))
            visits = [int(e["visits"]) for e in entries]
            assert visits == sorted(visits, reverse=True)
            totals.append(sum(visits))
        assert totals[-1] > totals[0], "the search should grow between lines"
        # The next command after the analysis was answered normally.
        assert engine.read_answer() == (True, ["= kgrpc"])
        # lz-analyze: integers in 0..10000; an empty line ends it too.
        engine.write("lz-analyze 10")
        time.sleep(1.0)
        engine.write("")
        ok, lines = engine.read_answer()
        assert ok and lines[0] == "=" and len(lines) >= 2
        entries, ownership = parse_kata(lines[1], 7)
        assert ownership is None and 0 <= int(str(entries[0]["winrate"])) <= 10000
        assert engine.ok("name") == "kgrpc"
        # Analysis stats survive in the tree: genmove after analysis still answers at once.
        assert from_gtp(engine.ok("genmove w"), 7) <= 49
        for bad, why in (
            ("kata-analyze w interval x", "interval must be"),
            ("kata-analyze b 10 frobs 3", "unknown analysis key 'frobs' (known: interval"),
            ("kata-analyze b 10 maxmoves", "'maxmoves' has no value"),
        ):
            success, text = engine.send(bad)
            assert not success and why in text, text
        err = engine.quit()
        assert "Task was destroyed" not in err and "Traceback" not in err, err
    finally:
        if engine.proc.poll() is None:
            engine.proc.kill()


def test_analysis_needs_a_model(random_engine):
    success, text = random_engine.send("kata-analyze b 10")
    assert not success and "needs a model" in text


@pytest.mark.slow
def test_end_of_input_closes_the_model_player_cleanly(model: Path):
    proc = subprocess.run(
        gtp_command("--model", str(model), "--visits", "8", "--size", "5"),
        input="boardsize 5\ngenmove b\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("=\n\n= ")
    assert "Task was destroyed" not in proc.stderr and "Traceback" not in proc.stderr
