"""Monotone gating (issue 11, items 11 and 12), against a real coordinator on loopback.

A candidate is always matched against the current best; a release supersedes the matches
pending against the old best (their tasks answer FAILED_PRECONDITION "match_superseded",
nothing is recorded) and matches their candidates again; no model is released without
beating the model it replaces.
"""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest

from kgrpc import protocol
from kgrpc.coordinator import db
from kgrpc.coordinator.gating import SUPERSEDED_REASON
from kgrpc.coordinator.testing import match_game
from kgrpc.mcts.config import SelfPlayConfig
from kgrpc.net import Outage, make_channel
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from kgrpc.worker.lifecycle import TaskRegistry
from kgrpc.worker.link import CoordinatorLink
from kgrpc.worker.matches import MatchReporter
from kgrpc.worker.source import Job
from tests.model_files import publish
from tests.worker_helpers import worker_config

B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
S0, S200, S400 = "kg-b2c16-s0-d0", "kg-b2c16-s200-d100", "kg-b2c16-s400-d200"


class Gate:
    """A worker's view: match tasks and their reports."""

    def __init__(self, stub, worker_id: str) -> None:
        self.stub, self.w, self.n = stub, worker_id, 0

    async def task(self) -> coordinator_pb2.Task:
        return await self.stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=self.w))

    async def match_task(self, candidate: str) -> coordinator_pb2.Task:
        for _ in range(10):
            t = await self.task()
            if t.WhichOneof("kind") == "match" and t.match.candidate_model == candidate:
                return t
        raise AssertionError(f"no match task for {candidate}")

    def report(self, t: coordinator_pb2.Task, candidate_wins: int, candidate_losses: int = 0):
        games = []
        for i in range(candidate_wins + candidate_losses):
            self.n += 1
            colour = B if i % 2 == 0 else W
            # A legal game with its record (match_records_required, the default).
            games.append(match_game(t, colour, i < candidate_wins, self.n, game_id=f"g{self.n}"))
        return self.stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=t.task_id,
                worker_id=self.w,
                candidate_model=t.match.candidate_model,
                reference_model=t.match.reference_model,
                games=games,
            )
        )


async def stats(stub) -> coordinator_pb2.Stats:
    return await stub.GetStats(coordinator_pb2.GetStatsRequest())


def measured(st: coordinator_pb2.Stats) -> dict[str, bool]:
    return {m.name: m.elo_measured for m in st.models}


def best(st: coordinator_pb2.Stats) -> str:
    released = [m for m in st.models if m.status == common_pb2.MODEL_STATUS_RELEASED]
    return max(released, key=lambda m: m.released_unix_ms).name


async def test_a_candidate_that_only_beat_an_old_best_never_replaces_a_newer_one(
    coordinator_factory,
) -> None:
    # The run: s200 released, then s400, which had only beaten s0, replaced it.
    coord = await coordinator_factory(
        gating_games=4, match_chunk_games=4, release_every_steps=0, gating_elo_threshold=0.0
    )
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        gate = Gate(stub, (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id)
        await publish(coord, S0)
        await publish(coord, S200)
        await publish(coord, S400)
        t200, t400 = await gate.match_task(S200), await gate.match_task(S400)
        assert t200.match.reference_model == t400.match.reference_model == S0
        assert (await gate.report(t400, 2)).decision == "pending"  # s400 leads s0 2-0
        assert (await gate.report(t200, 4)).decision == "released"  # s200 beats s0: released
        # s400's match against s0 is obsolete: its task answers a definite status at once.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gate.report(t400, 2)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert err.value.details().startswith(f"{SUPERSEDED_REASON}:")
        assert S200 in err.value.details()
        info = protocol.error_info(err.value)  # the structured form beside the message
        assert info is not None and info.reason == "MATCH_SUPERSEDED"
        assert dict(info.metadata) == {
            "task_id": t400.task_id,
            "candidate": S400,
            "reference": S0,
            "best": S200,
        }
        assert protocol.is_match_superseded(err.value)
        st = await stats(stub)
        assert best(st) == S200
        by_pair = {(m.candidate_model, m.reference_model): m for m in st.matches}
        old = by_pair[(S400, S0)]
        assert old.decision == "superseded" and (old.wins, old.losses) == (2, 0)  # nothing added
        assert by_pair[(S400, S200)].decision == "pending"
        # Whose Elo is known: the anchor and s200 (its match was decided); s400's only match
        # so far was superseded, which rates nothing.
        assert measured(st) == {S0: True, S200: True, S400: False}
        # s400 is matched again, from 0 games, against s200: it loses and is not released.
        again = await gate.match_task(S400)
        assert again.match.reference_model == S200 and again.match.games == 4
        assert (await gate.report(again, 1, 3)).decision == "rejected"
        st = await stats(stub)
        assert best(st) == S200
        assert {m.name: m.status for m in st.models}[S400] == common_pb2.MODEL_STATUS_REJECTED
        assert measured(st)[S400]  # a rejection measures the candidate too


async def test_a_candidate_that_beats_the_new_best_is_released_with_a_chained_elo(
    coordinator_factory,
) -> None:
    coord = await coordinator_factory(
        gating_games=2, match_chunk_games=2, release_every_steps=0, gating_elo_threshold=0.0
    )
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        gate = Gate(stub, (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id)
        await publish(coord, S0)
        await publish(coord, S200)
        await publish(coord, S400)
        t200 = await gate.match_task(S200)
        assert (await gate.report(t200, 2)).decision == "released"
        again = await gate.match_task(S400)
        assert again.match.reference_model == S200
        assert (await gate.report(again, 2)).decision == "released"
        st = await stats(stub)
        elo = {m.name: m.elo for m in st.models}
        assert best(st) == S400 and elo[S400] > elo[S200] > elo[S0]
        assert all(measured(st).values())
        latest = await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())
        assert latest.model.name == S400 and latest.model.elo_measured
        assert not [m for m in st.matches if m.decision == "pending"]


async def test_a_release_with_gating_off_supersedes_matches_left_from_before(
    coordinator_factory,
) -> None:
    coord = await coordinator_factory(gating_games=2, match_chunk_games=2)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        gate = Gate(stub, (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id)
        await publish(coord, S0)
        await publish(coord, S200)
        t200 = await gate.match_task(S200)
    await coord.stop()
    # Restarted with gating off: the next publish is released at once.
    cfg = coord.app.cfg
    again = await coordinator_factory(data_dir=cfg.data_dir, gating_enabled=False)
    await publish(again, S400)
    async with make_channel(again.address, token=coord.worker_token) as ch:  # the same worker
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        gate.stub = stub
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await gate.report(t200, 2)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        st = await stats(stub)
        assert best(st) == S400
        pairs = {(m.candidate_model, m.reference_model): m.decision for m in st.matches}
        assert pairs == {(S200, S0): "superseded", (S200, S400): "pending"}
        # s400, released without a match, carries s0's Elo: not a measurement. ListModels
        # and GetLatestModel say the same as GetStats.
        assert measured(st) == {S0: True, S200: False, S400: False}
        listed = await stub.ListModels(coordinator_pb2.ListModelsRequest())
        assert {m.name: m.elo_measured for m in listed.models} == measured(st)
        latest = await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())
        assert latest.model.name == S400 and not latest.model.elo_measured


async def test_start_up_supersedes_matches_against_an_old_best(coordinator_factory) -> None:
    # An index written by an earlier version: a started match whose reference is no longer
    # the best (the old code re-pointed only matches without games).
    coord = await coordinator_factory(gating_games=2, match_chunk_games=2)
    await publish(coord, S0)
    await publish(coord, S200)
    await publish(coord, S400)
    data_dir = coord.app.cfg.data_dir
    await coord.stop()
    conn = db.connect(data_dir, index=coord.app.cfg.index)
    with db.transaction(conn):
        conn.execute(
            "UPDATE models SET status = 'released', released_ms = released_ms + 1 + "
            "(SELECT MAX(released_ms) FROM models) WHERE name = ?",
            (S200,),
        )
        conn.execute("UPDATE matches SET decision = 'released' WHERE candidate = ?", (S200,))
    conn.close()
    again = await coordinator_factory(data_dir=data_dir, gating_games=2, match_chunk_games=2)
    async with again.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        st = await stats(stub)
        pairs = {(m.candidate_model, m.reference_model): m.decision for m in st.matches}
        assert pairs[(S400, S0)] == "superseded" and pairs[(S400, S200)] == "pending"
        gate = Gate(stub, (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id)
        assert (await gate.match_task(S400)).match.reference_model == S200


async def test_the_worker_drops_a_superseded_match_task_at_once(
    coordinator_factory, tmp_path
) -> None:
    # Item 12: the worker's reporter neither retries nor reports an outage; it stops the
    # task's remaining games and records the decision.
    coord = await coordinator_factory(
        gating_games=4, match_chunk_games=4, release_every_steps=0, gating_elo_threshold=0.0
    )
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        gate = Gate(stub, (await stub.Register(coordinator_pb2.RegisterRequest())).worker_id)
        await publish(coord, S0)
        await publish(coord, S200)
        await publish(coord, S400)
        t200, t400 = await gate.match_task(S200), await gate.match_task(S400)
        assert (await gate.report(t200, 4)).decision == "released"
    cfg = worker_config(
        coord.address, coord.worker_token, tmp_path / "w", retry_base_s=0.05, retry_cap_s=0.05
    )
    link = CoordinatorLink(cfg, Outage("coordinator"), asyncio.Event(), random.Random(0))
    link.open()
    abandoned: list[str] = []
    reporter = MatchReporter(
        link, TaskRegistry("test"), on_superseded=lambda task: abandoned.append(task.task_id)
    )
    try:
        job = Job(t400, 0, SelfPlayConfig(), gate.w)
        reporter.submit(
            job,
            coordinator_pb2.MatchGame(
                game_id="late", candidate_color=B, winner=B, score=1.5, moves=50
            ),
        )
        assert await asyncio.wait_for(reporter.drain(lambda: False), 30)
    finally:
        await link.close()
    assert abandoned == [t400.task_id]
    assert reporter.decisions[t400.task_id] == "superseded"
    assert not link.outage.down
