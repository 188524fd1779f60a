"""Issue 31: no gating decision rests on one token, and a token whose results stand out is
set aside. Real coordinators on loopback, several worker tokens, legal records
(kgrpc.coordinator.testing.match_game); the outlier test's false-positive rate by seeded
simulation.
"""

from __future__ import annotations

import math
import random
from typing import Any

import aiohttp

from kgrpc.coordinator import auth, quorum, remote
from kgrpc.coordinator.testing import RunningCoordinator, match_game
from kgrpc.fisher import fisher_exact
from kgrpc.net import make_channel
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.dashboard_helpers import FIRST, SECOND, http_url, publish

B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
EASY = dict(release_every_steps=0, gating_elo_threshold=0)


def new_token(coord: RunningCoordinator, label: str) -> tuple[str, int]:
    conn = coord.connect()  # SQLite or PostgreSQL, as the suite runs
    try:
        text, info = auth.create_token(conn, "worker", label)
    finally:
        conn.close()
    return text, info.id


class Volunteer:
    """One worker registered under its own token."""

    def __init__(self, coord: RunningCoordinator, token: str) -> None:
        self.ch = make_channel(coord.address, token=token)
        self.stub = coordinator_pb2_grpc.CoordinatorStub(self.ch)
        self.w = ""
        self.seed = random.Random(token).randrange(1 << 20)

    async def register(self) -> Volunteer:
        self.w = (await self.stub.Register(coordinator_pb2.RegisterRequest())).worker_id
        return self

    async def task(self) -> coordinator_pb2.Task:
        return await self.stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=self.w))

    async def play(self, task: coordinator_pb2.Task, wins: int) -> Any:
        """Report the task's games, ``wins`` of them won by the candidate."""
        games = []
        for i in range(task.match.games):
            self.seed += 1
            games.append(match_game(task, B if i % 2 else W, i < wins, self.seed))
        return await self.stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=task.task_id,
                worker_id=self.w,
                candidate_model=task.match.candidate_model,
                reference_model=task.match.reference_model,
                games=games,
            )
        )

    async def summary(self) -> coordinator_pb2.MatchSummary:
        st = await self.stub.GetStats(coordinator_pb2.GetStatsRequest())
        (m,) = [m for m in st.matches if m.candidate_model == SECOND]
        return m

    async def best(self) -> str:
        return (await self.stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())).model.name


async def test_one_token_cannot_release_and_a_second_tokens_games_are_needed(
    coordinator_factory,
) -> None:
    coord = await coordinator_factory(
        gating_games=4, match_chunk_games=4, gating_min_tokens=2, http_listen="127.0.0.1:0", **EASY
    )
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    a = await Volunteer(coord, coord.worker_token).register()
    a2 = await Volunteer(coord, coord.worker_token).register()  # a second worker, same token
    b = await Volunteer(coord, new_token(coord, "b")[0]).register()
    try:
        t = await a.task()
        assert t.WhichOneof("kind") == "match" and t.match.games == 4
        # Every game of the match, all won for the candidate: it waits for another token.
        out = await a.play(t, 4)
        assert out.decision == "pending"
        m = await a.summary()
        assert (m.wins, m.tokens, m.decision) == (4, 1, "pending")
        assert "1 of the 2 distinct worker tokens" in m.waiting
        st = await a.stub.GetStats(coordinator_pb2.GetStatsRequest())
        assert "    waiting: games from 1 of the 2 distinct" in remote.format_stats(st)
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"{http_url(coord)}/api/matches") as r,
        ):
            (row,) = [x for x in await r.json() if x["candidate"] == SECOND]
        assert (row["tokens"], row["decision"]) == (1, "pending")
        assert row["waiting"] == "games from 1 of the 2 distinct tokens needed"
        assert await a.best() == FIRST
        # The same token gets no more of the match, whichever of its workers asks.
        assert (await a.task()).WhichOneof("kind") == "selfplay"
        assert (await a2.task()).WhichOneof("kind") == "selfplay"
        # Another token gets a chunk beyond the games target, and its games decide.
        tb = await b.task()
        assert tb.WhichOneof("kind") == "match" and tb.match.games == 4
        assert (await b.play(tb, 2)).decision == "released"  # 6-2 from two tokens
        m = await b.summary()
        assert (m.wins, m.losses, m.tokens, m.waiting) == (6, 2, 2, "")
        assert await b.best() == SECOND
    finally:
        for v in (a, a2, b):
            await v.ch.close()


async def test_chunks_go_to_different_tokens_before_any_token_gets_a_second(
    coordinator_factory,
) -> None:
    coord = await coordinator_factory(gating_games=8, match_chunk_games=2, gating_min_tokens=3)
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    vs = [await Volunteer(coord, coord.worker_token).register()]
    vs += [await Volunteer(coord, new_token(coord, n)[0]).register() for n in ("b", "c")]
    try:
        kinds = [(await vs[0].task()).WhichOneof("kind"), (await vs[0].task()).WhichOneof("kind")]
        assert kinds == ["match", "selfplay"]  # one chunk until three tokens have one
        assert (await vs[1].task()).WhichOneof("kind") == "match"
        assert (await vs[0].task()).WhichOneof("kind") == "selfplay"
        assert (await vs[2].task()).WhichOneof("kind") == "match"
        assert (await vs[0].task()).WhichOneof("kind") == "match"  # now anyone may get more
    finally:
        for v in vs:
            await v.ch.close()


async def test_a_token_winning_every_game_is_set_aside_and_shown(coordinator_factory) -> None:
    coord = await coordinator_factory(
        gating_games=100,
        match_chunk_games=20,
        gating_min_tokens=3,
        http_listen="127.0.0.1:0",
        **EASY,
    )
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    liar_token, liar_id = new_token(coord, "liar")
    honest = [await Volunteer(coord, new_token(coord, n)[0]).register() for n in "bcd"]
    liar = await Volunteer(coord, liar_token).register()
    try:
        t = await liar.task()
        assert (await liar.play(t, 20)).decision == "pending"
        for v, wins in zip(honest, (10, 9, 11), strict=True):
            t = await v.task()
            assert t.WhichOneof("kind") == "match"
            await v.play(t, wins)
        m = await liar.summary()
        # The liar's 20 wins are left out: 30-30 from the three honest tokens.
        assert (m.wins, m.losses, m.tokens, m.decision) == (30, 30, 3, "pending")
        (aside,) = m.set_aside
        assert (aside.token_id, aside.why, aside.wins, aside.losses) == (liar_id, "outlier", 20, 0)
        assert (aside.others_wins, aside.others_games) == (30, 60)
        assert aside.p_value == fisher_exact(20, 0, 30, 30) < 0.001 / 4
        # It gets no more of this match; the others play the games still needed.
        assert (await liar.task()).WhichOneof("kind") == "selfplay"
        assert (await honest[0].task()).WhichOneof("kind") == "match"
        text = remote.format_stats(await liar.stub.GetStats(coordinator_pb2.GetStatsRequest()))
        assert (
            f"set aside: token {liar_id} (outlier) 20-0-0 against the others' 30 wins of 60" in text
        )
        # The dashboard's JSON and /metrics show it too.
        base = http_url(coord)
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{base}/api/matches") as r:
                (row,) = [x for x in await r.json() if x["candidate"] == SECOND]
            async with s.get(f"{base}/metrics") as r:
                metrics = await r.text()
        assert (row["wins"], row["losses"], row["tokens"]) == (30, 30, 3)
        assert [(x["token_id"], x["why"], x["wins"]) for x in row["set_aside"]] == [
            (liar_id, "outlier", 20)
        ]
        line = next(
            x
            for x in metrics.splitlines()
            if x.startswith("kgrpc_coordinator_gating_outlier_p_value{")
        )
        assert f'token="{liar_id}"' in line and SECOND in line
        assert float(line.rsplit(" ", 1)[1]) == aside.p_value
    finally:
        for v in (*honest, liar):
            await v.ch.close()


def test_fisher_exact_matches_published_values() -> None:
    # R: fisher.test(matrix(c(8, 1, 2, 5), 2)) and matrix(c(1, 11, 9, 3), 2).
    assert math.isclose(fisher_exact(8, 2, 1, 5), 0.03496503, rel_tol=1e-6)
    assert math.isclose(fisher_exact(1, 9, 11, 3), 0.002759456, rel_tol=1e-6)
    assert fisher_exact(10, 10, 30, 30) == 1.0 and fisher_exact(0, 0, 3, 4) == 1.0


def test_honest_tokens_are_almost_never_set_aside() -> None:
    """1,000 decisions by four honest tokens, 25 games each, at one win rate per decision
    (drawn from 0.2..0.8): the test runs at level 0.001 per decision (Bonferroni over the
    tokens), so false positives average at most 1 in 1,000; the bound leaves room for the
    Poisson spread (P(more than 5) < 0.001 at mean 1)."""
    level, decisions = 0.001, 1000
    rng = random.Random(31)
    false_positives = 0
    for _ in range(decisions):
        rate = rng.uniform(0.2, 0.8)
        by_token: dict[int | None, quorum.Counts] = {}
        for token in range(4):
            c = by_token.setdefault(token, quorum.Counts())
            for _ in range(25):
                c.add(B, B if rng.random() < rate else W)
        false_positives += bool(quorum.find_outliers(by_token, level))
    print(f"honest decisions with a token set aside: {false_positives} of {decisions}")
    bound = decisions * level + 4 * math.sqrt(decisions * level)
    assert false_positives <= bound
