"""Contributions are credited to the token's account (its label), never to the free-text
``--username`` a worker sends; that name is at most a display name, shown only when the
coordinator's ``display_names`` setting allows it. Through a real coordinator: GetStats'
worker rows and contributors, ``kgrpc-coordinator stats``'s text, the dashboard's JSON and
``workers list``."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from kgrpc.coordinator import auth
from kgrpc.coordinator import cli as coordinator_cli
from kgrpc.coordinator.remote import format_stats
from kgrpc.coordinator.testing import RunningCoordinator, upload_request
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_game
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

TASK = "selfplay-credit"  # the task every game here names, open to any worker


def new_token(coord: RunningCoordinator, label: str) -> str:
    conn = coord.connect()
    try:
        text, _ = auth.create_token(conn, "worker", label)
    finally:
        conn.close()
    return text


async def play(coord: RunningCoordinator, token: str, username: str, games: int, seed: int) -> str:
    """Register a worker named ``username`` under ``token`` and upload ``games`` games of it;
    its worker id."""
    async with make_channel(coord.address, token=token) as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        wid = (
            await stub.Register(coordinator_pb2.RegisterRequest(username=username, hostname="h"))
        ).worker_id
        await stub.Heartbeat(coordinator_pb2.HeartbeatRequest(worker_id=wid))
        records = []
        for i in range(games):
            g = make_random_game(9, seed=seed + i, task_id=TASK)
            g.worker_id = wid
            records.append(g)
        resp = await stub.UploadGames(iter([upload_request(records)]))
        assert resp.accepted == games, resp
    return wid


async def stats(coord: RunningCoordinator) -> coordinator_pb2.Stats:
    async with coord.channel("worker") as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest()
        )


async def two_workers_and_a_pretender(coord: RunningCoordinator) -> dict[str, str]:
    """Two workers of the test token ("test worker") named alice-box and bob-box, one game
    each, a third of it naming itself "carol"; and carol's own token with one worker."""
    await coord.store_tasks_for([make_random_game(9, seed=0, task_id=TASK)])
    carol = new_token(coord, "carol")
    return {
        "alice-box": await play(coord, coord.worker_token, "alice-box", 2, 10),
        "bob-box": await play(coord, coord.worker_token, "bob-box", 1, 20),
        "pretender": await play(coord, coord.worker_token, "carol", 1, 30),
        "carol": await play(coord, carol, "carol-laptop", 3, 40),
    }


def contributors(s: coordinator_pb2.Stats) -> dict[str, Any]:
    return {c.username: c for c in s.contributors}


async def test_games_are_credited_to_the_tokens_label(coordinator_factory) -> None:
    coord = await coordinator_factory(http_listen="127.0.0.1:0")
    ids = await two_workers_and_a_pretender(coord)
    s = await stats(coord)
    by_id = {w.worker_id: w for w in s.workers}
    for name in ("alice-box", "bob-box", "pretender"):
        assert by_id[ids[name]].username == "test worker"
        assert by_id[ids[name]].display_name == ""  # display_names is off by default
    assert by_id[ids["carol"]].username == "carol"

    # One row per account: naming itself "carol" gave that worker none of carol's credit.
    c = contributors(s)
    assert set(c) == {"test worker", "carol"}
    assert (c["test worker"].games, c["test worker"].workers) == (4, 3)
    assert (c["carol"].games, c["carol"].workers) == (3, 1)
    assert list(c["test worker"].display_names) == []

    text = format_stats(s)
    assert "alice-box" not in text and "carol-laptop" not in text
    head = text.index("contributors")
    assert any(line.split()[:3] == ["test", "worker", "4"] for line in text[head:].splitlines())

    base = coord.app.dashboard.url.rstrip("/")
    async with aiohttp.ClientSession() as session, session.get(base + "/api/contributors") as r:
        users = {u["username"]: u for u in await r.json()}
    assert users["test worker"]["games"] == 4 and users["carol"]["games"] == 3
    assert users["test worker"]["display_names"] == []


async def test_display_names_when_allowed_beside_the_label(
    coordinator_factory, capsys: pytest.CaptureFixture[str]
) -> None:
    coord = await coordinator_factory(http_listen="127.0.0.1:0", display_names=True)
    ids = await two_workers_and_a_pretender(coord)
    s = await stats(coord)
    by_id = {w.worker_id: w for w in s.workers}
    assert (by_id[ids["alice-box"]].username, by_id[ids["alice-box"]].display_name) == (
        "test worker",
        "alice-box",
    )
    assert by_id[ids["bob-box"]].display_name == "bob-box"
    # Shown as a display name beside the account it is credited to, never as that account.
    assert (by_id[ids["pretender"]].username, by_id[ids["pretender"]].display_name) == (
        "test worker",
        "carol",
    )
    c = contributors(s)
    assert list(c["test worker"].display_names) == ["alice-box", "bob-box", "carol"]
    assert c["test worker"].games == 4 and c["carol"].games == 3
    assert list(c["carol"].display_names) == ["carol-laptop"]

    text = format_stats(s)
    line = next(x for x in text.splitlines() if x.strip().startswith("test worker"))
    assert line.rstrip().endswith("alice-box, bob-box, carol")

    base = coord.app.dashboard.url.rstrip("/")
    async with aiohttp.ClientSession() as session, session.get(base + "/api/contributors") as r:
        users = {u["username"]: u for u in await r.json()}
    assert users["test worker"]["display_names"] == ["alice-box", "bob-box", "carol"]

    # The operator's own listing names the account and, apart, what the worker chose.
    where = ["--data-dir", str(coord.data_dir)]
    if coord.app.cfg.index:
        where += ["--index", coord.app.cfg.index]  # the PostgreSQL run of the suite
    rc = coordinator_cli.main(["workers", "list", *where, "--json"])
    assert rc == 0
    rows = {r["worker_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows[ids["pretender"]]["account"] == "test worker"
    assert rows[ids["pretender"]]["username"] == "carol"
    assert rows[ids["carol"]]["account"] == "carol"
    rc = coordinator_cli.main(["workers", "list", *where])
    out = capsys.readouterr().out
    assert rc == 0
    pretender = next(x for x in out.splitlines() if x.startswith(ids["pretender"][:21]))
    assert pretender.rstrip().endswith("test worker@h (carol)")
