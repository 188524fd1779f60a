"""Records: proto <-> game <-> training rows, and every ReplayError reason code."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.features import encode, pack_planes, packed_row_bytes
from kgrpc.go.playout import random_move
from kgrpc.go.rules import PRESETS
from kgrpc.records.build import RECORD_FORMAT_VERSION, game_to_proto, make_target
from kgrpc.records.errors import REASON_CODES, ReplayError
from kgrpc.records.replay import proto_to_board_replay
from kgrpc.records.rows import training_rows
from kgrpc.records.terms import TaskTerms, komi_in_range, move_cap
from kgrpc.records.validate import validate_record
from kgrpc.v1 import common_pb2, records_pb2


def play_game(size: int, seed: int, rules_name: str = "chinese", komi: float = 7.5):
    """A random game to the end with a plausible sparse target at every move."""
    rng = random.Random(seed)
    board = Board(size, PRESETS[rules_name], komi)
    targets = []
    positions = []
    while not board.is_over() and board.move_number < move_cap(size):
        move = random_move(board, rng)
        legal = [m for m in np.flatnonzero(board.legal_mask()).tolist() if m != move]
        chosen = [move, *rng.sample(legal, min(2, len(legal)))]
        weights = np.array([rng.random() + 0.1 for _ in chosen])
        weights /= weights.sum()
        full = rng.random() < 0.6
        visits = 100 if full else 16
        targets.append(
            make_target(
                dict(zip(chosen, weights.tolist(), strict=True)),
                visits=visits,
                root_value=rng.uniform(-1, 1),
                root_score=rng.uniform(-10, 10),
                full_search=full,
                played_visits=max(1, round(visits * weights[0])),
            )
        )
        positions.append(board.copy())
        board.play(move)
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


def _first_full(r) -> int:
    return next(i for i, t in enumerate(r.targets) if t.full_search)


def _drop_played(r, i: int) -> None:
    """Move target i's share of the played move onto its other moves, played_visits 0."""
    t = r.targets[i]
    pairs = zip(t.policy_moves, t.policy_probs, strict=True)
    probs = [0.0 if m == r.moves[i] else p for m, p in pairs]
    t.ClearField("policy_probs")
    t.policy_probs.extend([p / sum(probs) for p in probs])
    t.played_visits = 0


def _played_unvisited(r):
    # Issue 11, item 10: a full-search target that gives the played move no probability.
    _drop_played(r, _first_full(r))


def _played_visits_over_visits(r):
    t = r.targets[_first_full(r)]
    t.played_visits = t.visits + 1


def _resigned_after_passes(r):
    # Issue 11, item 8: a game that ended by two passes, marked resigned with the loser as winner.
    loser = common_pb2.COLOR_WHITE if r.result.score > 0 else common_pb2.COLOR_BLACK
    r.result.winner = loser
    r.result.score = -r.result.score
    r.result.resigned = True


def _resigner_named_winner(r):
    # Resigned at move 21: white was to move and resigned, yet the record says white won.
    _cut(r, 21)
    r.result.resigned = True
    r.result.winner = common_pb2.COLOR_WHITE
    r.result.score = -3.5


def _cut(r, k: int) -> None:
    """Truncate ``r`` to ``k`` moves with the result a scorer would give that position."""
    board = Board(9, komi=r.komi)
    for m in r.moves[:k]:
        board.play(m)
    del r.moves[k:]
    del r.targets[k:]
    r.result.CopyFrom(game_to_proto(board, list(r.targets), game_id=r.game_id).result)


def _unfinished(r):
    # Issue 11, item 9: 12 moves, no passes, no resignation, far below any move cap.
    _cut(r, 12)


def _cut_off_with_area_score(r):
    # Issue 11, item 9: 40 moves, cut off with a matching area score and ownership.
    _cut(r, 40)


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
    (_played_unvisited, "played_move_unvisited"),
    (_played_visits_over_visits, "policy_invalid"),
    (_resigned_after_passes, "resign_inconsistent"),
    (_resigner_named_winner, "resign_inconsistent"),
    (_unfinished, "unfinished"),
    (_cut_off_with_area_score, "unfinished"),
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
    assert {code for _, code in CASES} | {"task_mismatch"} == set(REASON_CODES)
    assert {code for *_, code in TASK_CASES} == {"task_mismatch"}


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
    for m in board.moves[:21]:
        short.play(m)
    rec = game_to_proto(short, targets[:21], game_id="r", resigned_winner=BLACK, resign_score=12.5)
    assert validate_record(rec).score == 12.5
    rec.result.score = score
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "result_mismatch"


# ----------------------------------------------------------------------------- meaning


def test_the_good_record_ended_by_two_passes():
    rec = _good()
    assert rec.moves[-2:] == [81, 81] and not rec.result.resigned
    assert rec.format_version == RECORD_FORMAT_VERSION


def test_a_game_stopped_exactly_at_its_move_cap_is_accepted():
    rec = _good()
    _cut(rec, 40)
    # A coordinator whose cap on 9x9 is 40 moves: the same game is finished there.
    replay = validate_record(rec, max_moves=40)
    assert replay.num_moves == 40 and not replay.resigned
    assert validate_record(rec, max_moves_per_point=40 / 81 + 1e-4).num_moves == 40
    with pytest.raises(ReplayError) as e:
        validate_record(rec, max_moves=39)
    assert e.value.reason_code == "too_long"


def test_resigning_at_the_move_cap_is_inconsistent():
    rec = _good()
    _cut(rec, 41)
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
    rec = _good()
    rec.format_version = 0
    for t in rec.targets:
        t.played_visits = 0
    validate_record(rec)  # every played move has a positive share in its target
    _played_unvisited(rec)
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "played_move_unvisited"


def test_a_pruned_target_may_leave_out_the_played_move_if_it_had_visits():
    rec = _good()
    i = _first_full(rec)
    _played_unvisited(rec)  # the played move left out of the target...
    rec.targets[i].played_visits = 2  # ...after its search gave it two visits
    validate_record(rec)


def test_format_2_needs_played_visits_on_every_full_search_target():
    rec = _good()
    i = _first_full(rec)
    rec.targets[i].played_visits = 0  # the move still has its share in the policy
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "played_move_unvisited"
    assert e.value.detail.startswith(f"move {i + 1} (")  # moves counted from 1
    rec.format_version = 1
    validate_record(rec)


def test_a_cheap_search_may_leave_out_the_played_move():
    rec = _good()
    _drop_played(rec, next(i for i, t in enumerate(rec.targets) if not t.full_search))
    validate_record(rec)


def test_game_to_proto_writes_format_1_without_played_visits():
    board, targets, _ = play_game(9, 2)
    targets[0].played_visits = 0
    targets[0].full_search = True
    assert game_to_proto(board, targets, game_id="x").format_version == 1


# ----------------------------------------------------------------------------- task terms


def _terms(rec, **kw) -> TaskTerms:
    base = dict(
        task_id="selfplay-1",
        board_size=9,
        rules="chinese",
        komi_low=7.5,
        komi_high=7.5,
        komi_step=0.0,
        max_moves=162,
        models=("m1",),
        worker_id="w-1",
    )
    base.update(kw)
    rec.task_id = "selfplay-1"
    rec.black_model = rec.white_model = "m1"
    return TaskTerms(**base)


TASK_CASES = [
    ("other_task", dict(task_id="selfplay-2"), "task_mismatch"),
    ("other_size", dict(board_size=13, max_moves=338), "task_mismatch"),
    ("other_rules", dict(rules="tromp-taylor"), "task_mismatch"),
    ("other_komi", dict(komi_low=6.5, komi_high=6.5), "task_mismatch"),
    ("komi_outside_range", dict(komi_low=0.5, komi_high=6.5, komi_step=1.0), "task_mismatch"),
    ("komi_off_grid", dict(komi_low=0.0, komi_high=10.0, komi_step=2.0), "task_mismatch"),
    ("other_model", dict(models=("m2",)), "task_mismatch"),
    ("other_worker", dict(worker_id="w-2"), "task_mismatch"),
]


@pytest.mark.parametrize(("name", "change", "code"), TASK_CASES, ids=[c[0] for c in TASK_CASES])
def test_a_game_must_be_what_its_task_asked_for(name, change, code):
    rec = _good()
    validate_record(rec, task=_terms(rec), worker_id="w-1")
    with pytest.raises(ReplayError) as e:
        validate_record(rec, task=_terms(rec, **change), worker_id="w-1")
    assert e.value.reason_code == code, str(e.value)
    assert "selfplay-" in e.value.detail


def test_task_komi_range_and_match_models():
    rec = _good()
    ranged = _terms(rec, komi_low=5.5, komi_high=8.5, komi_step=0.5)
    validate_record(rec, task=ranged, worker_id="w-1")
    assert komi_in_range(7.5, 5.5, 8.5, 0.5) and not komi_in_range(7.25, 5.5, 8.5, 0.5)
    assert not komi_in_range(9.0, 5.5, 8.5, 0.5) and not komi_in_range(float("nan"), 0, 9, 1)
    match = _terms(rec, models=("cand", "ref"))
    rec.black_model, rec.white_model = "ref", "cand"
    validate_record(rec, task=match, worker_id="w-1")
    rec.black_model = "cand"  # both sides the candidate: not the match it was issued for
    with pytest.raises(ReplayError) as e:
        validate_record(rec, task=match, worker_id="w-1")
    assert e.value.reason_code == "task_mismatch"


def test_the_task_cap_is_the_one_issued_not_the_current_setting():
    rec = _good()
    _cut(rec, 40)
    terms = _terms(rec, max_moves=40)
    # The settings changed since (cap 162 now): the game stopped at its task's cap is finished.
    assert validate_record(rec, task=terms, worker_id="w-1").num_moves == 40
    with pytest.raises(ReplayError) as e:
        validate_record(rec, task=_terms(rec), worker_id="w-1")
    assert e.value.reason_code == "unfinished"


def test_details_count_moves_from_one_and_name_colours():
    # docs/clients.md, "The acks": a client author reads "move 1" as the first move and
    # "black"/"white" as colours (never the engine's +1/-1 or the enum's 1/2).
    rec = _good()
    rec.moves[0] = rec.board_size**2 + 7  # the first move, off the board
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "illegal_move"
    assert e.value.detail.startswith("move 1: "), e.value.detail

    rec = _good()
    truth = rec.result.winner
    rec.result.winner = (
        common_pb2.COLOR_WHITE if truth == common_pb2.COLOR_BLACK else common_pb2.COLOR_BLACK
    )
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    said, real = ("white", "black") if truth == common_pb2.COLOR_BLACK else ("black", "white")
    assert e.value.reason_code == "result_mismatch"
    assert f"record says winner {said} score" in e.value.detail, e.value.detail
    assert f"replay gives winner {real} score" in e.value.detail, e.value.detail
    assert not re.search(r"winner [+-]?[0-9]", e.value.detail), e.value.detail
