"""Rules of the Go engine: captures, suicide, ko, superko, passes, scoring, ownership, masks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.go.playout import random_move, random_playout
from kgrpc.go.rules import CHINESE, PRESETS, Rules
from kgrpc.v1 import common_pb2


def board_from(diagram: str, to_play: int = BLACK, rules: Rules = CHINESE, komi: float = 0.0):
    rows = [r.split() for r in diagram.strip().splitlines()]
    n = len(rows)
    assert all(len(r) == n for r in rows), "diagram must be square"
    cells = [c for r in rows for c in r]
    b = Board(n, rules, komi)
    b.set_stones(
        black=[i for i, c in enumerate(cells) if c == "X"],
        white=[i for i, c in enumerate(cells) if c == "O"],
        to_play=to_play,
    )
    b.check_invariants()
    return b


def mv(b: Board, gtp: str) -> None:
    b.play(from_gtp(gtp, b.size))
    b.check_invariants()


# ----------------------------------------------------------------------------- rules presets


def test_presets_and_proto_round_trip():
    assert Rules.from_name("chinese") == CHINESE == Rules("area", "simple", False)
    assert PRESETS["japanese"] == Rules("territory", "simple", False)
    assert PRESETS["tromp-taylor"] == Rules("area", "positional", True)
    assert PRESETS["aga"] == Rules("area", "situational", False)
    for name, rules in PRESETS.items():
        assert rules.name == name
        assert Rules.from_proto(rules.to_proto()) == rules
    assert Rules("territory", "positional", True).name is None
    with pytest.raises(ValueError, match="known presets: chinese, japanese"):
        Rules.from_name("ing")
    with pytest.raises(ValueError, match="scoring"):
        Rules.from_proto(common_pb2.Rules(ko=common_pb2.KO_RULE_SIMPLE))
    with pytest.raises(ValueError, match="ko"):
        Rules.from_proto(common_pb2.Rules(scoring=common_pb2.SCORING_RULE_AREA))


def test_coords_round_trip():
    from kgrpc.go.coords import from_sgf, to_sgf

    assert to_gtp(0, 19) == "A19" and to_gtp(360, 19) == "T1" and to_gtp(361, 19) == "pass"
    assert from_gtp("j1", 9) == 80 and from_gtp("PASS", 9) == 81
    assert to_sgf(1, 9) == "ba" and from_sgf("ba", 9) == 1 and from_sgf("", 9) == 81
    for n in (2, 9, 19):
        for p in range(n * n + 1):
            assert from_gtp(to_gtp(p, n), n) == p
            assert from_sgf(to_sgf(p, n), n) == p
    for bad in ("I5", "Z1", "A0", "A10", "", "5A"):
        with pytest.raises(ValueError):
            from_gtp(bad, 9)


# ----------------------------------------------------------------------------- captures


def test_single_and_multi_stone_captures():
    b = board_from(
        """
        . X O . .
        X O O X .
        . X X . .
        . . . . .
        . . . . .
        """
    )
    # White's two-stone group (B4, C4) plus C5 has one liberty left at D5.
    assert b.group_liberties(from_gtp("B4", 5)) == 1
    mv(b, "D5")
    assert b.stones[from_gtp("B4", 5)] == 0 and b.stones[from_gtp("C5", 5)] == 0
    assert b.captures == {BLACK: 3, WHITE: 0}
    assert b.to_play == WHITE


def test_capture_two_groups_at_once_and_capture_beats_suicide():
    b = board_from(
        """
        O X . X O
        . O X O .
        . . . . .
        . . . . .
        . . . . .
        """,
        to_play=WHITE,
    )
    # Black B5 and D5 each have one liberty (C5); white C5 would have no liberty itself,
    # but it captures both, so it is legal.
    mv(b, "C5")
    assert b.captures[WHITE] == 2
    assert b.stones[from_gtp("B5", 5)] == 0 and b.stones[from_gtp("D5", 5)] == 0
    assert b.group_liberties(from_gtp("C5", 5)) == 2


def test_suicide_forbidden_under_chinese():
    b = board_from(
        """
        . X . . .
        X X . . .
        . . . . .
        . . . . .
        . . . . .
        """,
        to_play=WHITE,
    )
    a5 = from_gtp("A5", 5)
    assert not b.is_legal(a5)
    assert not b.legal_mask()[a5]
    with pytest.raises(IllegalMoveError, match="suicide"):
        b.play(a5)
    # The failed move changed nothing.
    assert b.to_play == WHITE and b.moves == []


def test_multi_stone_suicide_allowed_under_tromp_taylor():
    b = board_from(
        """
        O . X . .
        X X X . .
        . . . . .
        . . . . .
        . . . . .
        """,
        to_play=WHITE,
        rules=PRESETS["tromp-taylor"],
    )
    b5 = from_gtp("B5", 5)
    assert b.is_legal(b5)
    mv(b, "B5")  # white A5+B5 have no liberty and capture nothing: the group comes off
    assert b.stones[from_gtp("A5", 5)] == 0 and b.stones[b5] == 0
    assert b.captures[BLACK] == 2
    assert b.group_liberties(from_gtp("A4", 5)) == 7  # A5 B5 D5 D4 A3 B3 C3


def test_single_stone_suicide_repeats_the_board_so_positional_superko_forbids_it():
    diagram = """
        . X . . .
        X . . . .
        . . . . .
        . . . . .
        . . . . .
        """
    a5 = from_gtp("A5", 5)
    b = board_from(diagram, WHITE, Rules("area", "positional", True))
    with pytest.raises(IllegalMoveError, match="superko"):
        b.play(a5)
    # Situational superko: the board after the suicide never existed with black to move.
    b = board_from(diagram, WHITE, Rules("area", "situational", True))
    mv(b, "A5")
    assert b.stones[a5] == 0 and b.to_play == BLACK and b.captures[BLACK] == 1


def test_simple_ko_and_non_ko_capture():
    b = board_from(
        """
        . X O . .
        X O . O .
        . X O . .
        . . . . .
        . . . . .
        """
    )
    mv(b, "C4")  # black captures B4
    assert b.ko_point == from_gtp("B4", 5)
    with pytest.raises(IllegalMoveError, match="ko"):
        b.play(from_gtp("B4", 5))
    assert not b.legal_mask()[from_gtp("B4", 5)]
    mv(b, "E1")  # ko threat
    mv(b, "E2")  # answer
    assert b.is_legal(from_gtp("B4", 5))
    mv(b, "B4")  # white retakes
    assert b.ko_point == from_gtp("C4", 5)
    b.play(b.pass_move)
    assert b.ko_point == -1

    # Capturing one stone with a stone that keeps other liberties is no ko.
    s = board_from(
        """
        O X . . .
        . . . . .
        . . . . .
        . . . . .
        . . . . .
        """
    )
    mv(s, "A4")
    assert s.captures[BLACK] == 1 and s.ko_point == -1
    assert s.is_legal(0) is False  # white A5 would be suicide now, not ko


TRIPLE_KO = """
. X O . . . . . .
X O . O . . . . .
. X O . . . . . .
. . . . . . . . .
. X O . . . . . .
X O . O . . . . .
. X O . . . . . .
. . . . . . . . .
. . . . . . . . .
"""


def _triple_ko_board(rules: Rules) -> Board:
    b = board_from(TRIPLE_KO, BLACK, rules)
    # A third ko on the right; black holds the first one (stone on C8 instead of white B8).
    b2 = Board(9, rules, 0.0)
    black = [p for p in range(81) if b.stones[p] == BLACK]
    white = [p for p in range(81) if b.stones[p] == WHITE]
    extra_b = [from_gtp(v, 9) for v in ("F9", "E8", "F7")]
    extra_w = [from_gtp(v, 9) for v in ("G9", "F8", "H8", "G7")]
    white.remove(from_gtp("B8", 9))
    black.append(from_gtp("C8", 9))
    b2.set_stones(black + extra_b, white + extra_w, BLACK)
    b2.check_invariants()
    return b2


@pytest.mark.parametrize("rules_name", ["chinese", "tromp-taylor", "aga"])
def test_triple_ko_cycle_is_legal_under_simple_ko_and_banned_under_superko(rules_name):
    b = _triple_ko_board(PRESETS[rules_name])
    start = b.stones
    # Black takes ko 2, white retakes ko 1, black takes ko 3, white retakes ko 2,
    # black takes ko 1, white retakes ko 3 -> the starting board with black to move.
    cycle = ["C4", "B8", "G8", "B4", "C8"]
    for v in cycle:
        mv(b, v)
    last = from_gtp("F8", 9)
    if rules_name == "chinese":
        mv(b, "F8")
        assert np.array_equal(b.stones, start) and b.to_play == BLACK
    else:
        assert not b.is_legal(last) and not b.legal_mask()[last]
        assert last in b.ko_banned()
        with pytest.raises(IllegalMoveError, match="superko"):
            b.play(last)


# ----------------------------------------------------------------------------- passes


def test_two_passes_end_the_game_and_a_move_resets_the_count():
    b = Board(9)
    b.play(b.pass_move)
    mv(b, "E5")
    b.play(b.pass_move)
    assert not b.is_over()
    b.play(b.pass_move)
    assert b.is_over() and b.consecutive_passes == 2
    assert not b.legal_mask().any()
    assert not b.is_legal(b.pass_move)
    with pytest.raises(IllegalMoveError, match="game over"):
        b.play(0)
    capped = Board(9, max_moves=3)
    for m in (0, 1, 2):
        capped.play(m)
    assert capped.is_over()


def test_off_board_and_occupied_are_illegal():
    b = Board(9)
    with pytest.raises(IllegalMoveError, match="off"):
        b.play(82)
    with pytest.raises(IllegalMoveError, match="off"):
        b.play(-1)
    b.play(40)
    with pytest.raises(IllegalMoveError, match="occupied"):
        b.play(40)


# ----------------------------------------------------------------------------- scoring

SCORING = """
. X O . .
X X O . .
. X O O O
X X O . .
. X O . X
"""


def test_area_and_territory_scoring_with_dead_stones():
    b = board_from(SCORING, komi=0.5)
    expected = np.array(
        [
            [1, 1, -1, -1, -1],
            [1, 1, -1, -1, -1],
            [1, 1, -1, -1, -1],
            [1, 1, -1, 0, 0],
            [1, 1, -1, 0, 1],
        ],
        dtype=np.int8,
    )
    own = b.area_ownership()
    assert own.dtype == np.int8 and np.array_equal(own.reshape(5, 5), expected)
    # Area: black 8 stones + 3 points = 11; white 7 stones + 4 points = 11; D2 E2 D1 are dame.
    assert b.score() == pytest.approx(11 - 11 - 0.5)
    e1 = from_gtp("E1", 5)
    # E1 dead: the dame region plus E1 becomes white's (4 more points).
    assert b.score(dead=[e1]) == pytest.approx(10 - 15 - 0.5)
    assert b.ownership(dead=[e1]).reshape(5, 5)[3:, 3:].tolist() == [[-1, -1], [-1, -1]]
    with pytest.raises(ValueError, match="holds no stone"):
        b.score(dead=[from_gtp("A5", 5)])

    j = board_from(SCORING, rules=PRESETS["japanese"], komi=0.5)
    # Territory: black 3, white 4, no captures.
    assert j.score() == pytest.approx(3 - 4 - 0.5)
    # E1 dead: one prisoner for white, and 4 more points of white territory.
    assert j.score(dead=[e1]) == pytest.approx(3 - (8 + 1) - 0.5)


def test_dame_is_neutral_and_captures_count_in_territory():
    b = board_from(
        """
        . X . O .
        . X . O .
        . X . O .
        . X . O .
        . X . O .
        """,
        rules=PRESETS["japanese"],
    )
    own = b.area_ownership().reshape(5, 5)
    assert (own[:, 2] == 0).all() and (own[:, 0] == 1).all() and (own[:, 4] == -1).all()
    assert b.score() == 0.0
    b.captures[BLACK] = 2
    assert b.score() == 2.0
    a = board_from(
        """
        . X . O .
        . X . O .
        . X . O .
        . X . O .
        . X . O .
        """
    )
    assert a.score() == 0.0


# ----------------------------------------------------------------------------- tiny boards


def test_two_by_two_board():
    b = Board(2, komi=0.0)
    b.play(0)  # B A2
    b.play(3)  # W B1
    b.play(1)  # B B2
    # White B1+A1 would have no liberty, but it takes black's two stones first.
    assert b.is_legal(2)
    b.play(2)
    assert b.stones.tolist() == [0, 0, -1, -1]
    assert b.captures[WHITE] == 2
    assert b.score() == -4.0
    b.check_invariants()
    # Black may not play either point (suicide), only pass.
    assert b.legal_mask().tolist() == [True, True, False, False, True]
    b.play(0)
    b.check_invariants()


def test_three_by_three_random_games_keep_invariants():
    rng = random.Random(7)
    for _ in range(200):
        b = Board(3, PRESETS[rng.choice(list(PRESETS))])
        while not b.is_over() and b.move_number < 60:
            b.play(rng.choice(b.legal_moves()))
            b.check_invariants()


# ----------------------------------------------------------------------------- masks


@pytest.mark.parametrize("rules_name", list(PRESETS))
@pytest.mark.parametrize("size", [5, 9])
def test_legal_mask_matches_is_legal_and_play(rules_name, size):
    rng = random.Random(size * 31 + len(rules_name))
    for _ in range(4):
        b = Board(size, PRESETS[rules_name])
        while not b.is_over() and b.move_number < 3 * size * size:
            mask = b.legal_mask()
            for p in range(size * size + 1):
                assert mask[p] == b.is_legal(p), (to_gtp(p, size), str(b))
            # Brute force: a move is legal exactly when play() accepts it on a copy.
            for p in rng.sample(range(size * size), 6):
                c = b.copy()
                try:
                    c.play(p)
                    ok = True
                except IllegalMoveError:
                    ok = False
                assert ok == mask[p]
            legal = np.flatnonzero(mask).tolist()
            # Mostly board moves, an occasional pass.
            board_moves = [m for m in legal if m != b.pass_move]
            move = rng.choice(board_moves) if board_moves and rng.random() > 0.03 else b.pass_move
            b.play(move)
            b.check_invariants()


def test_copy_is_independent_and_hash_tracks_position():
    b = Board(9)
    for m in (40, 41, 30):
        b.play(m)
    c = b.copy()
    c.play(31)
    assert b.moves == [40, 41, 30] and c.moves == [40, 41, 30, 31]
    assert b.stones[31] == 0
    b.check_invariants()
    c.check_invariants()
    d = Board(9)
    for m in (30, 41, 40):
        d.play(m)
    assert d.position_hash() == b.position_hash()
    d.play(d.pass_move)
    assert d.position_hash() != b.position_hash()


def test_random_playout_never_fills_own_eyes_and_ends_with_all_groups_safe():
    rng = random.Random(3)
    for size in (5, 9, 13):
        b = Board(size)
        random_playout(b, rng)
        b.check_invariants()
        assert b.is_over()
        for p in range(size * size):
            if b.stones[p]:
                # Every group the opponent could capture would have been captured.
                assert b.group_liberties(p) >= 2 or b.ko_point >= 0
        for colour in (BLACK, WHITE):
            eyes = [p for p in range(size * size) if b.is_own_eye(p, colour)]
            for p in eyes:
                assert b.stones[p] == 0
    eye = board_from(
        """
        . X . . .
        X X . . .
        . . . . .
        . . . . .
        . . . . .
        """
    )
    assert eye.is_own_eye(0, BLACK) and not eye.is_own_eye(0, WHITE)
    moves = {random_move(eye, rng) for _ in range(200)}
    assert 0 not in moves and len(moves) > 10
