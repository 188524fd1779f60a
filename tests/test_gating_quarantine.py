"""Issue 31: ``kgrpc-coordinator token quarantine`` sets a token's games aside afterwards
(match counts, the shard listing trainers pull) without deleting anything, and
``token unquarantine`` brings them back. A real coordinator on loopback; the commands run on
its data directory while it serves, as an operator would run them."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from kgrpc import elo
from kgrpc.coordinator import cli, remote
from kgrpc.coordinator.testing import upload_requests
from kgrpc.randgame import make_random_game
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.dashboard_helpers import FIRST, SECOND, http_url, publish
from tests.test_gating_quorum import Volunteer, new_token
from trainer.remote_shards import PullResult, pull_shards


async def selfplay(v: Volunteer, seed: int) -> list[str]:
    task = await v.task()
    assert task.selfplay.model == FIRST, task
    games = [
        make_random_game(9, seed=seed + i, worker_id=v.w, model=FIRST, task_id=task.task_id)
        for i in range(2)
    ]
    assert (await v.stub.UploadGames(iter(upload_requests(games)))).accepted == 2
    return [g.game_id for g in games]


async def pull(coord, dest: Path) -> tuple[set[str], PullResult]:  # type: ignore[no-untyped-def]
    """What a trainer pulling shards (kgrpc-train run --pull-shards) has in its window."""
    result = await pull_shards(coord.address, coord.trainer_token, dest)
    run_dir = dest / "training_data" / coord.app.cfg.run
    return {p.name for p in run_dir.glob("games_*.npz")}, result


def shard_names(coord, indexes: set[int]) -> set[str]:  # type: ignore[no-untyped-def]
    conn = coord.connect(readonly=True)
    try:
        rows = conn.execute("SELECT idx, file_name FROM shards").fetchall()
        return {r["file_name"] for r in rows if r["idx"] in indexes}
    finally:
        conn.close()


async def listed_shards(coord) -> set[int]:  # type: ignore[no-untyped-def]
    async with coord.channel("trainer") as ch:
        out = await coordinator_pb2_grpc.CoordinatorStub(ch).ListShards(
            coordinator_pb2.ListShardsRequest()
        )
    return {s.index for s in out.shards}


def shards_of(coord, game_ids: list[str]) -> set[int]:  # type: ignore[no-untyped-def]
    conn = coord.connect(readonly=True)
    try:
        marks = ",".join("?" * len(game_ids))
        q = f"SELECT DISTINCT shard_index FROM games WHERE game_id IN ({marks})"
        return {r[0] for r in conn.execute(q, game_ids)}
    finally:
        conn.close()


def counted_rows(coord) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    conn = coord.connect(readonly=True)
    try:
        return (
            conn.execute("SELECT COUNT(*) FROM match_games").fetchone()[0],
            conn.execute("SELECT COUNT(*) FROM games").fetchone()[0],
        )
    finally:
        conn.close()


async def test_quarantine_takes_a_tokens_games_out_and_undo_brings_them_back(
    coordinator_factory, capsys, tmp_path: Path
) -> None:
    coord = await coordinator_factory(
        gating_games=4,
        match_chunk_games=2,
        release_every_steps=0,
        gating_elo_threshold=0,
        http_listen="127.0.0.1:0",
    )
    await publish(coord, FIRST)
    bad_token, bad_id = new_token(coord, "faulty box")
    bad = await Volunteer(coord, bad_token).register()
    good = await Volunteer(coord, coord.worker_token).register()
    try:
        bad_games = await selfplay(bad, 100)
        await coord.app.ingest.cut(older_than_s=0)  # its own shard
        good_games = await selfplay(good, 200)
        await coord.app.ingest.cut(older_than_s=0)
        bad_shards, good_shards = shards_of(coord, bad_games), shards_of(coord, good_games)
        assert bad_shards.isdisjoint(good_shards) and None not in bad_shards | good_shards
        assert await listed_shards(coord) == bad_shards | good_shards
        trainer = tmp_path / "trainer"
        everything = shard_names(coord, bad_shards | good_shards)
        assert (await pull(coord, trainer))[0] == everything
        await publish(coord, SECOND)
        await bad.play(await bad.task(), 2)
        assert (await good.play(await good.task(), 2)).decision == "released"  # 4-0
        decided_elo = (await good.summary()).elo_diff
        assert decided_elo == pytest.approx(elo.elo_interval(4, 0, 0).elo)
        before = counted_rows(coord)

        data = ["--data-dir", str(coord.data_dir), "--index", coord.app.cfg.index]
        assert cli.main(["token", "quarantine", *data, "--id", str(bad_id)]) == 0
        out = capsys.readouterr().out
        assert f"token {bad_id}: games reported since the start are left out" in out
        assert f"match {SECOND} vs {FIRST} [released]: 2 games left out" in out
        # The trainer's next listing holds none of its rows; the match counts drop its games
        # and say that the decision they fed would now be another one (it is not undone).
        assert await listed_shards(coord) == good_shards
        # A trainer that pulled them before sets them aside in its cache (withdrawn/).
        assert (await pull(coord, trainer))[0] == shard_names(coord, good_shards)
        withdrawn = trainer / "training_data" / coord.app.cfg.run / "withdrawn"
        assert {p.name for p in withdrawn.iterdir()} == shard_names(coord, bad_shards)
        m = await good.summary()
        assert (m.wins, m.losses, m.tokens, m.decision, m.recount) == (
            2,
            0,
            1,
            "released",
            "pending",
        )
        assert [(a.token_id, a.why, a.wins) for a in m.set_aside] == [(bad_id, "quarantine", 2)]
        # The match's Elo is that of the games still counted, in stats and on the dashboard.
        assert m.elo_diff == pytest.approx(elo.elo_interval(2, 0, 0).elo) != decided_elo
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"{http_url(coord)}/api/matches") as r,
        ):
            (row,) = [x for x in await r.json() if x["candidate"] == SECOND]
        assert (row["wins"], row["elo_diff"]) == (2, pytest.approx(m.elo_diff))
        st = await good.stub.GetStats(coordinator_pb2.GetStatsRequest())
        (q,) = st.quarantined_tokens
        assert (q.token_id, q.label, q.match_games, q.training_games) == (
            bad_id,
            "faulty box",
            2,
            2,
        )
        assert await good.best() == SECOND
        text = remote.format_stats(st)
        assert f"set aside: token {bad_id} (quarantine) 2-0-0" in text
        assert "its counted games now say pending (not undone" in text
        assert f"token {bad_id} 'faulty box' since" in text and "2 training games" in text
        assert counted_rows(coord) == before  # nothing deleted
        assert cli.main(["token", "list", *data]) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if "faulty box" in x]
        assert "since the start" in line

        assert cli.main(["token", "unquarantine", *data, "--id", str(bad_id)]) == 0
        assert await listed_shards(coord) == bad_shards | good_shards
        window, result = await pull(coord, trainer)
        assert window == everything
        assert result.downloaded == [] and len(result.restored) == len(bad_shards)  # moved back
        m = await good.summary()
        assert (m.wins, m.tokens, m.recount, list(m.set_aside)) == (4, 2, "", [])
        assert m.elo_diff == decided_elo
        assert cli.main(["token", "unquarantine", *data, "--id", str(bad_id)]) == 1
    finally:
        for v in (bad, good):
            await v.ch.close()


def test_since_takes_epoch_seconds_or_iso_time() -> None:
    from kgrpc.coordinator.token_quarantine import parse_since

    assert parse_since("1767225600") == 1767225600000
    assert parse_since("2026-01-01") == 1767225600000
    assert parse_since("2026-01-01T01:00+01:00") == 1767225600000
    with pytest.raises(Exception, match="neither"):
        parse_since("yesterday")
