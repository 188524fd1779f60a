"""GNU Go as an independent oracle: same legality on every try, same final stones and score.

Random games with illegal tries (occupied points, suicides, ko recaptures) are driven through
GNU Go (``--mode gtp --chinese-rules``) and our engine. Games are played to two passes without
filling own eyes, so every stone on the board is alive and the area score needs no judgement.
"""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from kgrpc.go.board import BLACK, Board
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.go.playout import random_move

GNUGO = shutil.which("gnugo") or shutil.which("/usr/games/gnugo")

pytestmark = pytest.mark.skipif(
    GNUGO is None, reason="GNU Go not installed (apt-get install gnugo): oracle test skipped"
)


class GnuGo:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [GNUGO, "--mode", "gtp", "--chinese-rules"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def cmd(self, command: str) -> str:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        lines = []
        while True:
            line = self.proc.stdout.readline()
            assert line, "GNU Go died"
            if line == "\n":
                break
            lines.append(line.rstrip("\n"))
        text = "\n".join(lines)
        assert text.startswith("="), f"GNU Go: {command!r} -> {text}"
        return text[1:].strip()

    def close(self) -> None:
        self.cmd("quit")
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def gnugo():
    g = GnuGo()
    yield g
    g.close()


def _colour(c: int) -> str:
    return "black" if c == BLACK else "white"


@pytest.mark.parametrize(
    ("size", "seed"), [(5, 1), (5, 6), (7, 2), (7, 7), (9, 3), (9, 4), (9, 8), (13, 5), (19, 9)]
)
def test_same_legality_and_final_position_as_gnugo(gnugo, size, seed):
    rng = random.Random(seed)
    gnugo.cmd(f"boardsize {size}")
    gnugo.cmd("clear_board")
    gnugo.cmd("komi 7.5")
    board = Board(size, komi=7.5)
    tries = 0
    while not board.is_over() and board.move_number < 4 * size * size:
        mover = _colour(board.to_play)
        # Random tries anywhere, including occupied points, suicides and ko recaptures.
        candidates = rng.sample(range(size * size), 3)
        if board.ko_point >= 0:
            candidates.append(board.ko_point)
        for p in candidates:
            ours = board.is_legal(p)
            theirs = gnugo.cmd(f"is_legal {mover} {to_gtp(p, size)}") == "1"
            assert ours == theirs, f"{to_gtp(p, size)} for {mover} after {board.moves}"
            tries += 1
        if board.move_number % 10 == 0:
            listed = gnugo.cmd(f"all_legal {mover}").split()
            theirs_all = {from_gtp(v, size) for v in listed}
            ours_all = set(board.legal_moves()) - {board.pass_move}
            assert ours_all == theirs_all, f"all_legal differs after {board.moves}"
        move = random_move(board, rng)
        board.play(move)
        gnugo.cmd(f"play {mover} {to_gtp(move, size)}")
    assert board.is_over() and tries > 30
    their = Board(size, komi=7.5)
    black = [from_gtp(v, size) for v in gnugo.cmd("list_stones black").split()]
    white = [from_gtp(v, size) for v in gnugo.cmd("list_stones white").split()]
    their.set_stones(black, white)
    assert their.stones.tolist() == board.stones.tolist()
    assert their.score() == board.score()
    # The captures GNU Go counted match ours too.
    assert int(gnugo.cmd("captures black")) == board.captures[BLACK]
