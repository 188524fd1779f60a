"""SGF export read by an independent reader (sgfmill), and sgfmill-written SGF read by us."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kgrpc import native, sgf
from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.playout import random_playout
from kgrpc.go.rules import PRESETS
from kgrpc.records.build import game_to_proto, make_target
from kgrpc.sgf import SgfError, board_to_sgf, parse_sgf, record_to_sgf, sgf_to_board

sgfmill_sgf = pytest.importorskip("sgfmill.sgf")
sgf_moves = pytest.importorskip("sgfmill.sgf_moves")


def _sgfmill_final_stones(text: str) -> tuple[int, np.ndarray]:
    """Replay with sgfmill's own board (its own capture logic) -> int8 stones in our indexing."""
    game = sgfmill_sgf.Sgf_game.from_string(text)
    board, plays = sgf_moves.get_setup_and_moves(game)
    for colour, move in plays:
        if move is not None:
            board.play(move[0], move[1], colour)
    n = game.get_size()
    stones = np.zeros(n * n, np.int8)
    for colour, (row, col) in board.list_occupied_points():
        # sgfmill rows count from the bottom.
        stones[(n - 1 - row) * n + col] = 1 if colour == "b" else -1
    return n, stones


@pytest.mark.parametrize("size", [9, 13, 19])
def test_sgfmill_reads_our_record_and_replays_to_the_same_position(size):
    rng = random.Random(size)
    board = Board(size, komi=6.5)
    random_playout(board, rng)
    targets = [
        make_target({m: 1.0}, visits=i + 1, root_value=(i % 7) / 7 - 0.5, full_search=i % 2 == 0)
        for i, m in enumerate(board.moves)
    ]
    rec = game_to_proto(board, targets, game_id="x", black_model="kg1-b6c96-s1", white_model="w]x")
    text = record_to_sgf(rec)
    game = sgfmill_sgf.Sgf_game.from_string(text)
    root = game.get_root()
    assert game.get_size() == size and game.get_komi() == 6.5
    assert root.get("RU") == "Chinese"
    assert root.get("PB") == "kg1-b6c96-s1" and root.get("PW") == "w]x"
    score = board.score()
    assert root.get("RE") == (f"B+{score:g}" if score > 0 else f"W+{-score:g}")
    nodes = game.get_main_sequence()[1:]
    assert len(nodes) == len(board.moves)
    assert float(nodes[3].get("KGV")) == pytest.approx(targets[3].root_value, abs=1e-4)
    assert int(nodes[3].get("KGN")) == 4
    n, stones = _sgfmill_final_stones(text)
    assert np.array_equal(stones, board.stones)
    # And back through our own reader.
    ours = sgf_to_board(text)
    assert ours.moves == board.moves and np.array_equal(ours.stones, board.stones)
    parsed = parse_sgf(text)
    assert parsed.visits[:3] == [1, 2, 3] and parsed.full[:2] == [True, False]


def test_we_read_sgfmill_written_sgf_with_setup_variations_and_escapes():
    game = sgfmill_sgf.Sgf_game(size=9)
    root = game.get_root()
    root.set("KM", 5.5)
    root.set("RU", "Japanese")
    root.set("PB", "a \\ b ] c")
    root.set_setup_stones([(6, 2), (2, 6)], [(4, 4)])
    moves = [("w", (3, 3)), ("b", (5, 5)), ("w", None), ("b", (0, 0))]
    node = root
    for colour, move in moves:
        node = node.new_child()
        node.set_move(colour, move)
    # A variation that must be ignored (not the main line).
    root.new_child().set_move("w", (8, 8))
    text = game.serialise().decode()
    parsed = parse_sgf(text)
    assert parsed.komi == 5.5 and parsed.rules == PRESETS["japanese"]
    assert parsed.black == "a \\ b ] c"
    b = sgf_to_board(text)
    n, stones = _sgfmill_final_stones(text)
    # sgfmill's get_setup_and_moves puts the setup stones on its board too.
    assert np.array_equal(b.stones, stones)
    assert b.stones[(8 - 4) * 9 + 4] == WHITE and b.stones[(8 - 6) * 9 + 2] == BLACK
    assert len(b.moves) == 4 and b.moves[2] == 81


def test_our_board_export_and_errors():
    b = Board(5, PRESETS["tromp-taylor"], 0.5)
    for m in (12, 13, 25, 7):
        b.play(m)
    text = board_to_sgf(b, black="x", result="W+R")
    again = sgf_to_board(text)
    assert again.moves == b.moves and again.rules == b.rules and again.komi == 0.5
    assert sgf_to_board(text, max_moves=2).moves == [12, 13]
    with pytest.raises(SgfError):
        parse_sgf("no tree here")
    with pytest.raises(SgfError):
        parse_sgf("(;SZ[23])")
    with pytest.raises(SgfError):
        parse_sgf("(;SZ[9];B[zz])")


@pytest.mark.skipif(not native.ENABLED, reason="native core not installed")
def test_native_move_text_is_the_reference_text_byte_for_byte() -> None:
    rng = random.Random(3)
    heads = ["(;FF[4]SZ[9]", "(;" + "PB[modèle-é]" * 7, "(;" + "x" * 78, "(;" + "y" * 79]
    for case in range(300):
        size = rng.choice([2, 3, 5, 9, 13, 19])
        nn = size * size
        moves = [rng.randrange(nn + 1) for _ in range(rng.randrange(0, 120))]
        values = [rng.uniform(-1, 1) for _ in moves] if case % 4 else None
        if values and case % 7 == 0:
            values[0] = -0.0
            values[-1] = 0.00005
        visits = [rng.randrange(0, 5000) for _ in moves] if case % 3 else None
        full = [rng.random() < 0.3 for _ in moves] if case % 5 else None
        first = rng.choice(heads)
        want = sgf._moves_text_python(first, size, moves, values, visits, full)
        got = native.ext.sgf_moves_text(first, len(first), size, moves, values, visits, full)
        assert got == want, (case, got[:200], want[:200])
    huge = [1e300, -1.7976931348623157e308, 5e-324]
    assert native.ext.sgf_moves_text("(;", 2, 9, [0, 1, 2], huge, None, None) == (
        sgf._moves_text_python("(;", 9, [0, 1, 2], huge, None, None)
    )
    nonfinite = [0.5, float("nan"), float("-inf")]
    assert native.ext.sgf_moves_text("(;", 2, 9, [0, 1, 2], nonfinite, None, None) is None
    assert "KGV[nan]" in sgf._write(
        9, 7.5, PRESETS["chinese"], [0, 1, 2], black="", white="", result=None, values=nonfinite
    )
    for bad in (-1, 82):
        with pytest.raises(ValueError, match=f"move {bad} is off a 9x9 board"):
            native.ext.sgf_moves_text("(;", 2, 9, [3, bad], None, None, None)
        with pytest.raises(ValueError, match=f"move {bad} is off a 9x9 board"):
            sgf._moves_text_python("(;", 9, [3, bad], None, None, None)


@pytest.mark.skipif(not native.ENABLED, reason="native core not installed")
def test_record_sgf_from_the_native_replay_is_the_text_from_the_targets() -> None:
    """The archive renders each game's SGF from its validation's native replay (per-move
    arrays read from the wire) instead of the record's targets: the same text, byte for byte."""
    from kgrpc.randgame import make_random_games
    from kgrpc.records.replay import replay_native

    for size, seed in ((9, 40), (13, 41), (19, 42)):
        for rec in make_random_games(4, size, seed=seed):
            for t in rec.targets[::5]:
                t.root_value = -t.root_value / 3  # values of every sign and many digits
            replay = replay_native(rec, check_targets=False)
            assert replay.move_values is not None and len(replay.move_values) == len(rec.moves)
            assert record_to_sgf(rec, replay) == record_to_sgf(rec)
