"""Records: proto <-> game <-> training rows, and every ReplayError reason code."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.features import encode, pack_planes, packed_row_bytes
from kgrpc.go.playout import random_move
from kgrpc.go.rules import PRESETS
from kgrpc.records import (
    REASON_CODES,
    ReplayError,
    game_to_proto,
    make_target,
    proto_to_board_replay,
    training_rows,
    validate_record,
)
from kgrpc.v1 import common_pb2, records_pb2


def play_game(size: int, seed: int, rules_name: str = "chinese", komi: float = 7.5):
    """A random game to the end with a plausible sparse target at every move."""
    rng = random.Random(seed)
    board = Board(size, PRESETS[rules_name], komi)
    targets = []
    positions = []
    while not board.is_over() and board.move_number < 4 * size * size:
        legal = np.flatnonzero(board.legal_mask())
        chosen = rng.sample(legal.tolist(), min(3, len(legal)))
        weights = np.array([rng.random() + 0.1 for _ in chosen])
        weights /= weights.sum()
        full = rng.random() < 0.6
        targets.append(
            make_target(
                dict(zip(chosen, weights.tolist(), strict=True)),
                visits=100 if full else 16,
                root_value=rng.uniform(-1, 1),
                root_score=rng.uniform(-10, 10),
                full_search=full,
            )
        )
        positions.append(board.copy())
        board.play(random_move(board, rng))
    return board, targets, positions


def record_of(size=9, seed=1, **kw) -> tuple[records_pb2.GameRecord, Board, list[Board]]:
    board, targets, positions = play_game(size, seed, **kw)
    rec = game_to_proto(board, targets, game_id=f"g{seed}", black_model="m1", white_model="m2")
    # Through the wire format, as the coordinator sees it.
    return records_pb2.GameRecord.FromString(rec.SerializeToString()), board, positions


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
    # Drop the final passes: white resigned mid-game.
    cut = 20
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


# ----------------------------------------------------------------------------- bad records


def _good() -> records_pb2.GameRecord:
    return record_of(9, 2)[0]


def _bad_size(r):
    r.board_size = 21


def _bad_rules(r):
    r.rules.CopyFrom(common_pb2.Rules())


def _bad_komi(r):
    r.komi = float("nan")


def _too_short(r):
    del r.moves[5:]
    del r.targets[5:]


def _too_long(r):
    r.moves.extend([81] * 600)


def _targets_mismatch(r):
    del r.targets[-1]


def _illegal_move(r):
    # Replay the first stone's point again: occupied.
    r.moves[1] = r.moves[0] if r.moves[0] != 81 else r.moves[2]


def _off_board(r):
    r.moves[3] = 82


def _policy_sum(r):
    r.targets[4].policy_probs[0] += 0.5


def _policy_illegal(r):
    first = r.moves[0]
    t = r.targets[2]
    t.policy_moves[0] = first  # occupied by then


def _policy_negative(r):
    t = r.targets[6]
    t.ClearField("policy_moves")
    t.ClearField("policy_probs")
    t.policy_moves.extend([81, 0])
    t.policy_probs.extend([1.5, -0.5])


def _value_invalid(r):
    r.targets[7].root_value = 1.5


def _result_mismatch(r):
    r.result.score += 1.0


def _winner_mismatch(r):
    r.result.winner = (
        common_pb2.COLOR_WHITE
        if r.result.winner == common_pb2.COLOR_BLACK
        else common_pb2.COLOR_BLACK
    )


def _ownership_mismatch(r):
    r.result.ownership[10] = -r.result.ownership[10] if r.result.ownership[10] else 1


def _ownership_short(r):
    del r.result.ownership[-1]


def _moves_after_end(r):
    last = records_pb2.SearchTarget()
    last.CopyFrom(r.targets[-1])
    r.moves.append(40)
    r.targets.append(last)


CASES = [
    (_bad_size, "bad_board_size"),
    (_bad_rules, "unsupported_rules"),
    (_bad_komi, "bad_komi"),
    (_too_short, "too_short"),
    (_too_long, "too_long"),
    (_targets_mismatch, "targets_mismatch"),
    (_illegal_move, "illegal_move"),
    (_off_board, "illegal_move"),
    (_moves_after_end, "illegal_move"),
    (_policy_sum, "policy_invalid"),
    (_policy_illegal, "policy_invalid"),
    (_policy_negative, "policy_invalid"),
    (_value_invalid, "value_invalid"),
    (_result_mismatch, "result_mismatch"),
    (_winner_mismatch, "result_mismatch"),
    (_ownership_mismatch, "ownership_mismatch"),
    (_ownership_short, "ownership_mismatch"),
]


@pytest.mark.parametrize(("corrupt", "code"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_each_corruption_gives_its_reason_code(corrupt, code):
    rec = _good()
    validate_record(rec)  # the untouched record passes
    corrupt(rec)
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == code, str(e.value)
    assert e.value.detail and code in str(e.value)


def test_every_reason_code_is_exercised():
    assert {code for _, code in CASES} == set(REASON_CODES)


def test_resigned_draw_is_rejected():
    rec = _good()
    rec.result.resigned = True
    rec.result.winner = common_pb2.COLOR_UNSPECIFIED
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "result_mismatch"
    assert WHITE == -1


@pytest.mark.parametrize("score", [3.0e38, -1e6, 82 + 7.5 + 1, -12.5, float("nan")])
def test_resigned_score_out_of_bounds_or_against_the_winner_is_rejected(score):
    # The score estimate of a resigned game becomes every row's score target.
    board, targets, _ = play_game(9, 3)
    short = Board(9)
    for m in board.moves[:20]:
        short.play(m)
    rec = game_to_proto(short, targets[:20], game_id="r", resigned_winner=BLACK, resign_score=12.5)
    assert validate_record(rec).score == 12.5
    rec.result.score = score
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "result_mismatch"
