"""Records: proto <-> game <-> training rows, and what a record means (its end, its move cap,
the played move's visits by format); tests/test_records_reasons.py gives every ReplayError
reason code."""

from __future__ import annotations

import numpy as np
import pytest

from kgrpc.go.board import BLACK, Board
from kgrpc.go.features import encode, pack_planes, packed_row_bytes
from kgrpc.records.build import RECORD_FORMAT_VERSION, game_to_proto
from kgrpc.records.errors import ReplayError
from kgrpc.records.replay import proto_to_board_replay
from kgrpc.records.rows import training_rows
from kgrpc.records.terms import move_cap
from kgrpc.records.validate import validate_record
from kgrpc.v1 import common_pb2
from tests.records_helpers import (
    cut,
    drop_played,
    first_full,
    good_record,
    play_game,
    played_unvisited,
    record_of,
)


def test_round_trip_proto_game_rows():
    rec, board, positions = record_of(9, 1)
    assert rec.board_size == 9 and list(rec.moves) == board.moves
    replay = validate_record(rec)
    assert replay.board.stones.tolist() == board.stones.tolist()
    assert replay.score == board.score() and replay.winner == (1 if board.score() > 0 else -1)
    assert np.array_equal(replay.ownership, board.area_ownership())
    rows = training_rows(rec, replay)
    full = [i for i, t in enumerate(rec.targets) if t.full_search]
    r = len(full)
    assert r > 10
    expect = {
        "states": (np.uint8, (r, packed_row_bytes(9))),
        "globals": (np.float32, (r, 8)),
        "policy": (np.float32, (r, 82)),
        "value": (np.float32, (r,)),
        "score": (np.float32, (r,)),
        "ownership": (np.int8, (r, 81)),
        "move_number": (np.int32, (r,)),
        "root_value": (np.float32, (r,)),
    }
    assert set(rows) == set(expect)
    for key, (dtype, shape) in expect.items():
        assert rows[key].dtype == dtype and rows[key].shape == shape, key
    assert rows["move_number"].tolist() == full
    np.testing.assert_allclose(rows["policy"].sum(axis=1), 1.0, rtol=1e-6)
    for row, i in enumerate(full):
        pos = positions[i]
        planes, glob = encode(pos)
        assert np.array_equal(rows["states"][row], pack_planes(planes[None])[0])
        assert np.array_equal(rows["globals"][row], glob)
        t = rec.targets[i]
        dense = np.zeros(82, np.float32)
        dense[list(t.policy_moves)] = list(t.policy_probs)
        np.testing.assert_allclose(rows["policy"][row], dense / dense.sum(), rtol=1e-6)
        mover = pos.to_play
        assert rows["value"][row] == mover * replay.winner
        assert rows["score"][row] == pytest.approx(mover * board.score())
        assert np.array_equal(rows["ownership"][row], mover * board.area_ownership())
        assert rows["root_value"][row] == np.float32(t.root_value)
    # Rows without a validation first give the same arrays.
    again = training_rows(rec)
    for key in rows:
        assert np.array_equal(again[key], rows[key])


def test_resigned_game_trusts_the_record_winner():
    board, targets, _ = play_game(9, 3)
    # Cut after black's 11th move: white, to move, resigned.
    cut = 21
    short = Board(9)
    for m in board.moves[:cut]:
        short.play(m)
    rec = game_to_proto(short, targets[:cut], game_id="r", resigned_winner=BLACK, resign_score=12.5)
    replay = validate_record(rec)
    assert replay.resigned and replay.winner == BLACK and replay.score == 12.5
    rows = training_rows(rec, replay)
    movers = np.where(np.array(rows["move_number"]) % 2 == 0, 1.0, -1.0)
    assert np.array_equal(rows["value"], movers.astype(np.float32))
    assert np.array_equal(rows["score"], (movers * 12.5).astype(np.float32))


def test_territory_rules_replay_and_draw():
    rec, board, _ = record_of(7, 4, rules_name="japanese", komi=0.0)
    replay = proto_to_board_replay(rec)
    assert replay.score == board.score()
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "unsupported_rules"
    assert validate_record(rec, allowed_rules=["chinese", "japanese"]).score == board.score()


# ----------------------------------------------------------------------------- meaning


def test_the_good_record_ended_by_two_passes():
    rec = good_record()
    assert rec.moves[-2:] == [81, 81] and not rec.result.resigned
    assert rec.format_version == RECORD_FORMAT_VERSION


def test_a_game_stopped_exactly_at_its_move_cap_is_accepted():
    rec = good_record()
    cut(rec, 40)
    # A coordinator whose cap on 9x9 is 40 moves: the same game is finished there.
    replay = validate_record(rec, max_moves=40)
    assert replay.num_moves == 40 and not replay.resigned
    assert validate_record(rec, max_moves_per_point=40 / 81 + 1e-4).num_moves == 40
    with pytest.raises(ReplayError) as e:
        validate_record(rec, max_moves=39)
    assert e.value.reason_code == "too_long"


def test_resigning_at_the_move_cap_is_inconsistent():
    rec = good_record()
    cut(rec, 41)
    rec.result.resigned, rec.result.winner, rec.result.score = True, common_pb2.COLOR_BLACK, 2.5
    assert validate_record(rec).resigned  # white resigned at move 41 of a longer game
    with pytest.raises(ReplayError) as e:
        validate_record(rec, max_moves=41)
    assert e.value.reason_code == "resign_inconsistent"


def test_move_cap_rounds_per_point_to_float32_like_the_wire():
    assert move_cap(9) == 162 and move_cap(19) == 499 and move_cap(19, 0) == 722
    assert move_cap(9, 0, 0.6) == 48 and move_cap(2, 0, 0.1) == 1
    wire = float(np.float32(1.1))
    assert move_cap(13, 0, 1.1) == move_cap(13, 0, wire) == int(wire * 169)


def test_older_writers_without_played_visits_are_still_accepted():
    rec = good_record()
    rec.format_version = 0
    for t in rec.targets:
        t.played_visits = 0
    validate_record(rec)  # every played move has a positive share in its target
    played_unvisited(rec)
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "played_move_unvisited"


def test_a_pruned_target_may_leave_out_the_played_move_if_it_had_visits():
    rec = good_record()
    i = first_full(rec)
    played_unvisited(rec)  # the played move left out of the target...
    rec.targets[i].played_visits = 2  # ...after its search gave it two visits
    validate_record(rec)


def test_format_2_needs_played_visits_on_every_full_search_target():
    rec = good_record()
    i = first_full(rec)
    rec.targets[i].played_visits = 0  # the move still has its share in the policy
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "played_move_unvisited"
    assert e.value.detail.startswith(f"move {i + 1} (")  # moves counted from 1
    rec.format_version = 1
    validate_record(rec)


def test_a_cheap_search_may_leave_out_the_played_move():
    rec = good_record()
    drop_played(rec, next(i for i, t in enumerate(rec.targets) if not t.full_search))
    validate_record(rec)


def test_game_to_proto_writes_format_1_without_played_visits():
    board, targets, _ = play_game(9, 2)
    targets[0].played_visits = 0
    targets[0].full_search = True
    assert game_to_proto(board, targets, game_id="x").format_version == 1
