"""Scoring finished positions that still hold dead stones (and seki), with GNU Go as a check."""

from __future__ import annotations

import random

import pytest

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.coords import to_gtp
from kgrpc.go.playout import random_playout
from kgrpc.programs.eval import scoring
from kgrpc.programs.eval.referee import GnuGoReferee, PlayoutReferee, find_gnugo, make_referee

GNUGO = find_gnugo()

# A finished 9x9 game: white B7 and F1 are dead inside black's area, black G7 inside white's.
DEAD_STONES = [
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
# 7x7: two outer groups with many eyes; inside, black C7-C6-C5-D5 and white E7-E6-E5 share
# the liberties D7 and D6 and neither may fill them: seki.
SEKI = [
    ". O X . O X .",
    "O O X . O X X",
    ". O X X O X .",
    "O O O O X X X",
    ". O . O X . X",
    "O O O O X X X",
    ". O . O X . X",
]


def position(rows: list[str], komi: float) -> Board:
    n = len(rows)
    board = Board(n, komi=komi)
    black, white = [], []
    for r, row in enumerate(rows):
        for c, ch in enumerate(row.split()):
            (black if ch == "X" else white if ch == "O" else []).append(r * n + c)
    board.set_stones(black, white)
    return board


def vertices(points, size: int) -> list[str]:
    return sorted(to_gtp(p, size) for p in points)


def test_dead_stones_are_removed_before_counting():
    board = position(DEAD_STONES, komi=7.5)
    status = scoring.stone_status(board)
    assert vertices(status.dead, 9) == ["B7", "F1", "G7"]
    assert status.seki == ()
    assert len(status.alive) + len(status.dead) == int((board.stones != 0).sum())
    # Counting every stone alive gives white the game; the true count gives it to black
    # (GNU Go's final_score says B+1.5 too).
    assert board.score() == -4.5
    assert scoring.score_without(board, status.dead) == 1.5
    assert scoring.result_text(1.5) == "B+1.5"


def test_seki_is_neither_dead_nor_territory():
    board = position(SEKI, komi=0.0)
    status = scoring.stone_status(board)
    assert status.dead == ()
    assert vertices(status.seki, 7) == ["C5", "C6", "C7", "D5", "E5", "E6", "E7"]
    assert vertices(scoring.seki_liberties(board), 7) == ["D6", "D7"]
    # D7 and D6 touch both colours: nobody's. White 21 + black 18 points on the rest.
    assert board.score(status.dead) == -3.0


def test_pass_alive_groups_are_found():
    board = position(SEKI, komi=0.0)
    white = scoring.pass_alive(board, WHITE)
    black = scoring.pass_alive(board, BLACK)
    # The outer groups have many one-point eyes; the seki chains are not pass-alive.
    assert vertices(white, 7) == vertices(
        [p for p in range(49) if board.stones[p] == WHITE and to_gtp(p, 7)[0] in "ABCD"], 7
    )
    assert "E7" not in vertices(white, 7) and "C7" not in vertices(black, 7)
    assert "F7" in vertices(black, 7)
    # A lone stone is not.
    lone = Board(5)
    lone.play(12)
    assert scoring.pass_alive(lone, BLACK) == set()


@pytest.mark.parametrize("seed", range(6))
def test_random_games_to_the_end_have_no_dead_stones(seed: int):
    # Random play that never fills its own eyes ends with every stone alive.
    board = Board(7)
    random_playout(board, random.Random(seed))
    assert board.is_over()
    status = scoring.stone_status(board)
    assert status.dead == ()
    assert scoring.score_without(board, status.dead) == board.score()


def test_empty_board_and_final_score_text():
    assert scoring.stone_status(Board(9)) == scoring.StoneStatus((), (), ())
    assert scoring.result_text(0.0) == "0"
    assert scoring.result_text(-0.5) == "W+0.5"
    with pytest.raises(ValueError):
        scoring.ownership_estimate(Board(5), playouts=0)


async def test_playout_referee_judges_the_dead_stones():
    judged = await PlayoutReferee().judge(position(DEAD_STONES, komi=7.5))
    assert judged.score == 1.5 and judged.referee == "playouts"
    assert vertices(judged.dead, 9) == ["B7", "F1", "G7"]
    assert make_referee("playouts").name == "playouts"
    with pytest.raises(ValueError, match="unknown referee"):
        make_referee("coin")


@pytest.mark.slow
@pytest.mark.skipif(GNUGO is None, reason="GNU Go not installed (apt-get install gnugo)")
async def test_gnugo_referee_agrees_on_dead_stones_and_seki():
    referee = GnuGoReferee(GNUGO)
    try:
        dead = await referee.judge(position(DEAD_STONES, komi=7.5))
        seki = await referee.judge(position(SEKI, komi=0.0))
    finally:
        await referee.close()
    assert dead.referee == "gnugo" and dead.note == ""
    assert vertices(dead.dead, 9) == ["B7", "F1", "G7"] and dead.score == 1.5
    assert seki.dead == () and seki.score == -3.0
    assert vertices(seki.seki, 7) == ["C5", "C6", "C7", "D5", "E5", "E6", "E7"]
    assert make_referee("auto").name == "gnugo"


async def test_gnugo_referee_falls_back_to_playouts_when_gnugo_fails():
    referee = GnuGoReferee("/nonexistent/gnugo")
    judged = await referee.judge(position(DEAD_STONES, komi=7.5))
    await referee.close()
    assert judged.referee == "playouts" and "GNU Go failed" in judged.note
    assert judged.score == 1.5
