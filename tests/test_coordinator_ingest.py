"""Coordinator ingest, validation: one test per rejection reason, games of every ending
accepted, the move cap, the terms of the task a game names, and the validation pool (a
process, replaced when it dies)."""

from __future__ import annotations

import asyncio
import math

import pytest

from kgrpc.randgame import make_random_game, make_random_games
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, records_pb2
from tests.ingest_helpers import ACCEPTED, REJECTED, upload
from tests.records_helpers import cut


def _mutations():
    def occupied(g):
        g.moves[2] = g.moves[0]

    def policy_sum(g):
        t = g.targets[5]
        t.policy_probs[:] = [2 * p for p in t.policy_probs]

    def policy_illegal(g):
        # mass on a point occupied since move 0
        t = g.targets[6]
        t.policy_moves[-1] = g.moves[0] if g.moves[0] not in t.policy_moves else g.moves[2]

    def negative(g):
        t = g.targets[3]
        t.policy_probs[0] = -t.policy_probs[0]

    def nan_policy(g):
        g.targets[3].policy_probs[0] = math.nan

    def resigned_after_passes(g):
        # Issue 11, item 8: ended by two passes, marked resigned with the loser as winner.
        assert list(g.moves[-2:]) == [81, 81]
        g.result.winner = LOSER[g.result.winner]
        g.result.score = -g.result.score
        g.result.resigned = True

    def played_unvisited(g):
        # Issue 11, item 10: a full-search target giving the played move no probability.
        t = g.targets[4]
        assert t.full_search and g.moves[4] in t.policy_moves
        pairs = zip(t.policy_moves, t.policy_probs, strict=True)
        keep = [(m, p) for m, p in pairs if m != g.moves[4]]
        del t.policy_moves[:], t.policy_probs[:]
        t.policy_moves.extend(m for m, _ in keep)
        t.policy_probs.extend(p / sum(q for _, q in keep) for _, p in keep)
        t.played_visits = 0

    return {
        "resign_inconsistent": ({}, resigned_after_passes),
        "unfinished_12_moves": ({}, lambda g: cut(g, 12)),  # issue 11, item 9
        "unfinished_40_moves_area_scored": ({}, lambda g: cut(g, 40)),  # issue 11, item 9
        "played_move_unvisited": ({}, played_unvisited),
        "too_short": (dict(max_moves=5), None),
        "unsupported_rules": (dict(rules="japanese"), None),
        "illegal_move": ({}, occupied),
        "policy_invalid": ({}, policy_sum),
        "policy_illegal_move": ({}, policy_illegal),
        "policy_negative": ({}, negative),
        "policy_nan": ({}, nan_policy),
        "value_invalid": ({}, lambda g: setattr(g.targets[4], "root_value", 3.0)),
        "result_mismatch": ({}, lambda g: setattr(g.result, "score", g.result.score + 2)),
        "ownership_mismatch": (
            {},
            lambda g: g.result.ownership.__setitem__(0, -g.result.ownership[0] or 1),
        ),
        "targets_mismatch": ({}, lambda g: g.targets.pop()),
        "bad_board_size": ({}, lambda g: setattr(g, "board_size", 20)),
        "bad_komi": ({}, lambda g: setattr(g, "komi", math.inf)),
        "bad_game_id": ({}, lambda g: setattr(g, "game_id", "")),
        "game_id_with_nul": (
            {},
            lambda g: setattr(g, "game_id", "game-1\x00"),
        ),  # "<U36" in shards drops it
    }


LOSER = {
    common_pb2.COLOR_BLACK: common_pb2.COLOR_WHITE,
    common_pb2.COLOR_WHITE: common_pb2.COLOR_BLACK,
}


def resigned_game(seed: int) -> records_pb2.GameRecord:
    """A game white resigned after black's 15th move (white to move, black wins)."""
    g = make_random_game(9, seed=seed)
    cut(g, 29)
    g.result.resigned, g.result.winner, g.result.score = True, common_pb2.COLOR_BLACK, 6.5
    return g


EXPECTED_REASON = {
    "unfinished_12_moves": "unfinished",
    "unfinished_40_moves_area_scored": "unfinished",
    "policy_illegal_move": "policy_invalid",
    "policy_negative": "policy_invalid",
    "policy_nan": "policy_invalid",
    "game_id_with_nul": "bad_game_id",
}


@pytest.mark.parametrize("case", list(_mutations()))
async def test_each_rejection_reason(coordinator, case) -> None:
    kwargs, mutate = _mutations()[case]
    game = make_random_game(9, seed=7, **kwargs)
    assert game.moves[0] != 81
    if mutate is not None:
        mutate(game)
    good = make_random_game(9, seed=8)
    resp = await upload(coordinator, [game, good])
    assert resp.rejected == 1 and resp.accepted == 1
    ack = resp.acks[0]
    assert ack.status == REJECTED
    assert ack.reason == EXPECTED_REASON.get(case, case), ack.detail
    assert ack.detail
    async with coordinator.channel() as ch:
        stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest()
        )
    assert stats.games_rejected == 1 and stats.rejects_by_reason[ack.reason] == 1
    (worker,) = [w for w in stats.workers if w.games_rejected]
    assert worker.rejects_by_reason[ack.reason] == 1


async def test_games_of_every_ending_are_accepted(coordinator_factory) -> None:
    coord = await coordinator_factory(max_moves=60)
    by_passes = next(
        g for g in (make_random_game(5, seed=s) for s in range(20)) if len(g.moves) < 60
    )
    at_cap = make_random_game(9, seed=3, max_moves=60)  # the coordinator's cap on 9x9
    assert len(at_cap.moves) == 60 and list(at_cap.moves[-2:]) != [81, 81]
    older = make_random_game(9, seed=4, max_moves=60)
    older.format_version = 0  # an older writer: no played_visits
    for t in older.targets:
        t.played_visits = 0
    resigned = resigned_game(5)
    resp = await upload(coord, [by_passes, at_cap, older, resigned])
    assert [a.status for a in resp.acks] == [ACCEPTED] * 4, [a.detail for a in resp.acks]
    # The same 60-move game is unfinished for a coordinator whose cap is 162 on 9x9.
    other = await coordinator_factory()
    resp = await upload(other, [at_cap])
    assert resp.acks[0].reason == "unfinished" and "162" in resp.acks[0].detail


async def test_too_long_is_configurable(coordinator_factory) -> None:
    coord = await coordinator_factory(max_moves=50)
    resp = await upload(coord, [make_random_game(9, seed=3)])
    assert resp.acks[0].reason == "too_long"


async def test_process_pool_validation(coordinator_factory) -> None:
    coord = await coordinator_factory(validate_workers=1)
    games = make_random_games(3, 9, seed=9)
    games[1].result.score += 1
    resp = await upload(coord, games)
    assert [a.status for a in resp.acks] == [ACCEPTED, REJECTED, ACCEPTED]
    assert resp.acks[1].reason == "result_mismatch"


@pytest.mark.slow
async def test_dead_validation_process_is_replaced(coordinator_factory) -> None:
    import os
    import signal

    coord = await coordinator_factory(validate_workers=1)
    assert (await upload(coord, [make_random_game(9, seed=21)])).accepted == 1
    pool = coord.app.validation.pool
    for pid in list(pool._processes):  # killed for memory, say
        os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if pool._broken:
            break
        await asyncio.sleep(0.02)
    assert pool._broken
    resp = await upload(coord, [make_random_game(9, seed=22)])
    assert resp.accepted == 1
    assert coord.app.validation.pool is not pool


def test_validation_with_the_terms_of_the_task_a_game_names() -> None:
    # What the ingest passes with each game: the stored terms of its task
    # (kgrpc.records.terms.TaskTerms).
    import dataclasses

    from kgrpc.coordinator import validate
    from kgrpc.records.terms import TaskTerms, move_cap

    g = make_random_game(9, seed=11, task_id="selfplay-x", model="m")
    data = g.SerializeToString()
    strict = validate.ValidationSettings(require_task=True)
    out = validate.validate_record_bytes(data, "w-1", strict)
    assert (out.ok, out.reason) == (False, "unknown_task") and "selfplay-x" in out.detail
    terms = TaskTerms("selfplay-x", 9, "chinese", 7.5, 7.5, 0.0, move_cap(9), ("m",), "w-1")
    assert validate.validate_many([(data, "w-1", terms)], strict)[0].ok
    for change in (dict(board_size=13), dict(komi_low=6.5, komi_high=6.5), dict(worker_id="w-2")):
        out = validate.validate_many([(data, "w-1", dataclasses.replace(terms, **change))], strict)[
            0
        ]
        assert (out.ok, out.reason) == (False, "task_mismatch"), out.detail
    lax = validate.ValidationSettings(require_task=False)
    assert validate.validate_many([(data, "w-1")], lax)[0].ok
