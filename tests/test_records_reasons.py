"""Every ReplayError reason code: a good record corrupted one way at a time, resigned results
out of bounds, games that are not what their task asked for (kgrpc.records.terms.TaskTerms),
and details that count moves from one and name colours."""

from __future__ import annotations

import re

import pytest

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.records.build import game_to_proto
from kgrpc.records.errors import REASON_CODES, ReplayError
from kgrpc.records.terms import TaskTerms, komi_in_range
from kgrpc.records.validate import validate_record
from kgrpc.v1 import common_pb2, records_pb2
from tests.records_helpers import cut, first_full, good_record, play_game, played_unvisited


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


def _played_visits_over_visits(r):
    t = r.targets[first_full(r)]
    t.played_visits = t.visits + 1


def _resigned_after_passes(r):
    # Issue 11, item 8: a game that ended by two passes, marked resigned with the loser as winner.
    loser = common_pb2.COLOR_WHITE if r.result.score > 0 else common_pb2.COLOR_BLACK
    r.result.winner = loser
    r.result.score = -r.result.score
    r.result.resigned = True


def _resigner_named_winner(r):
    # Resigned at move 21: white was to move and resigned, yet the record says white won.
    cut(r, 21)
    r.result.resigned = True
    r.result.winner = common_pb2.COLOR_WHITE
    r.result.score = -3.5


def _unfinished(r):
    # Issue 11, item 9: 12 moves, no passes, no resignation, far below any move cap.
    cut(r, 12)


def _cut_off_with_area_score(r):
    # Issue 11, item 9: 40 moves, cut off with a matching area score and ownership.
    cut(r, 40)


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
    (played_unvisited, "played_move_unvisited"),
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
    rec = good_record()
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
    rec = good_record()
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
    rec = good_record()
    validate_record(rec, task=_terms(rec), worker_id="w-1")
    with pytest.raises(ReplayError) as e:
        validate_record(rec, task=_terms(rec, **change), worker_id="w-1")
    assert e.value.reason_code == code, str(e.value)
    assert "selfplay-" in e.value.detail


def test_task_komi_range_and_match_models():
    rec = good_record()
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
    rec = good_record()
    cut(rec, 40)
    terms = _terms(rec, max_moves=40)
    # The settings changed since (cap 162 now): the game stopped at its task's cap is finished.
    assert validate_record(rec, task=terms, worker_id="w-1").num_moves == 40
    with pytest.raises(ReplayError) as e:
        validate_record(rec, task=_terms(rec), worker_id="w-1")
    assert e.value.reason_code == "unfinished"


def test_details_count_moves_from_one_and_name_colours():
    # docs/clients.md, "The acks": a client author reads "move 1" as the first move and
    # "black"/"white" as colours (never the engine's +1/-1 or the enum's 1/2).
    rec = good_record()
    rec.moves[0] = rec.board_size**2 + 7  # the first move, off the board
    with pytest.raises(ReplayError) as e:
        validate_record(rec)
    assert e.value.reason_code == "illegal_move"
    assert e.value.detail.startswith("move 1: "), e.value.detail

    rec = good_record()
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
