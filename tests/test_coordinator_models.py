"""Coordinator models: publish, resumable download, gating, curriculum, watch; and access "
"control."""

from __future__ import annotations

import asyncio
import hashlib
import shutil

import grpc
import pytest

from kgrpc.coordinator.config_values import CurriculumStage
from kgrpc.coordinator.gating import gating_decision
from kgrpc.coordinator.models import stage_for
from kgrpc.coordinator.testing import match_game
from kgrpc.records.terms import move_cap
from kgrpc.schema import FEATURE_VERSION
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.model_files import model_bytes
from tests.tls_helpers import self_signed_cert


def publish_requests(
    name: str,
    data: bytes,
    *,
    sha: str | None = None,
    size: int | None = None,
    steps: int | None = None,
):
    h = coordinator_pb2.PublishHeader(
        name=name,
        sha256=sha or hashlib.sha256(data).hexdigest(),
        size_bytes=len(data) if size is None else size,
        feature_version=FEATURE_VERSION,
    )
    msgs = [coordinator_pb2.PublishModelRequest(header=h)]
    msgs += [
        coordinator_pb2.PublishModelRequest(data=data[i : i + 1000])
        for i in range(0, len(data), 1000)
    ]
    return msgs


async def publish(
    coord, name: str, data: bytes | None = None, **kw
) -> coordinator_pb2.PublishModelResponse:
    """Publish ``data`` (default: a real model file named ``name``) with the trainer token."""
    if data is None:
        data = model_bytes(name)
    async with coord.channel("trainer") as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).PublishModel(
            iter(publish_requests(name, data, **kw))
        )


async def test_publish_and_resumable_download(coordinator) -> None:
    data = model_bytes("kg-b2c16-s0-d0")
    resp = await publish(coordinator, "kg-b2c16-s0-d0", data)
    assert not resp.gating_scheduled and resp.model.status == common_pb2.MODEL_STATUS_RELEASED
    assert (coordinator.data_dir / "models" / "kg-b2c16-s0-d0.onnx").read_bytes() == data
    async with coordinator.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        latest = await stub.GetLatestModel(coordinator_pb2.GetLatestModelRequest())
        assert latest.found and latest.model.name == "kg-b2c16-s0-d0"
        # interrupted after the first part: resume from an offset
        got = b""
        async for chunk in stub.DownloadModel(
            coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=0)
        ):
            assert chunk.offset == len(got)
            got += chunk.data[:100]
            info = chunk.info
            break
        assert info.size_bytes == len(data) and info.sha256 == hashlib.sha256(data).hexdigest()
        async for chunk in stub.DownloadModel(
            coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=len(got))
        ):
            assert chunk.offset == len(got)
            got += chunk.data
        assert hashlib.sha256(got).hexdigest() == info.sha256
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.DownloadModel(
                coordinator_pb2.DownloadModelRequest(name="nope-b1c1-s0-d0")
            ):
                pass
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.DownloadModel(
                coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=10**6)
            ):
                pass
        assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE


async def test_download_model_first_message_carries_info_and_data(coordinator) -> None:
    # The contract (coordinator.proto, docs/clients.md section 6): the first ModelChunk has
    # `info` and the first bytes of data, later ones data only; at offset == size, one
    # message with `info` and no data.
    data = model_bytes("kg-b2c16-s0-d0")
    await publish(coordinator, "kg-b2c16-s0-d0", data)
    async with coordinator.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)

        async def chunks(offset: int) -> list[coordinator_pb2.ModelChunk]:
            req = coordinator_pb2.DownloadModelRequest(name="kg-b2c16-s0-d0", offset=offset)
            return [c async for c in stub.DownloadModel(req)]

        got = await chunks(0)
        assert got[0].HasField("info") and got[0].info.size_bytes == len(data)
        assert got[0].offset == 0 and len(got[0].data) > 0
        assert not any(c.HasField("info") for c in got[1:])
        assert b"".join(c.data for c in got) == data
        assert [c.offset for c in got] == [
            sum(len(c.data) for c in got[:i]) for i in range(len(got))
        ]
        mid = await chunks(100)
        assert mid[0].HasField("info") and mid[0].offset == 100
        assert b"".join(c.data for c in mid) == data[100:]
        (end,) = await chunks(len(data))
        assert end.HasField("info") and end.offset == len(data) and end.data == b""


@pytest.mark.parametrize(
    "kw,fragment",
    [
        (dict(sha="0" * 64), "sha256 mismatch"),
        (dict(size=10), "more data than the declared"),
        (dict(size=99999), "header declared"),
    ],
)
async def test_publish_integrity_failures_store_nothing(coordinator, kw, fragment) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coordinator, "kg-b2c16-s0-d0", b"x" * 3000, **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in err.value.details()
    assert list((coordinator.data_dir / "models").iterdir()) == []


async def test_publish_bad_name_and_conflict(coordinator) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coordinator, "bad name", b"abc")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await publish(coordinator, "kg-b2c16-s0-d0")
    again = await publish(coordinator, "kg-b2c16-s0-d0")  # same bytes: idempotent
    assert again.model.name == "kg-b2c16-s0-d0"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coordinator, "kg-b2c16-s0-d0", model_bytes("kg-b2c16-s0-d0", seed=1))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS


@pytest.mark.parametrize(
    "name",
    [
        "kg-b2c16-s0-d0\n",  # a trailing newline
        ".kg.tmp-b2c16-s0-d0",  # hidden, and taken for a temporary file (deleted) at the next start
        "kg-b2c16-s99999999999999999999-d0",  # beyond SQLite's integers
        "k" * 300 + "-b2c16-s0-d0",  # beyond a file name's length
    ],
)
async def test_publish_refuses_odd_names_cleanly(coordinator, name) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(coordinator, name, b"abc")
    details = err.value.details()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not follow" in details or "PublishHeader.name has 312 characters" in details
    assert list((coordinator.data_dir / "models").iterdir()) == []
    async with coordinator.channel("worker") as ch:
        assert not (
            await coordinator_pb2_grpc.CoordinatorStub(ch).ListModels(
                coordinator_pb2.ListModelsRequest()
            )
        ).models


async def test_concurrent_publishes_of_one_name_keep_file_and_index_in_agreement(
    coordinator,
) -> None:
    name = "kg-b2c16-s0-d0"
    models_dir = coordinator.data_dir / "models"
    gates = [asyncio.Event(), asyncio.Event()]

    async def gated(data: bytes, gate: asyncio.Event):
        msgs = publish_requests(name, data)
        for m in msgs[:-1]:
            yield m
        await gate.wait()
        yield msgs[-1]

    async with coordinator.channel("trainer") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        contents = (model_bytes(name), model_bytes(name, seed=1))
        calls = [
            asyncio.ensure_future(stub.PublishModel(gated(d, g)))
            for d, g in zip(contents, gates, strict=True)
        ]
        for _ in range(500):  # both streams past the header checks, receiving data
            if len(list(models_dir.glob(".*.tmp*"))) == 2:
                break
            await asyncio.sleep(0.01)
        gates[0].set()
        first = await calls[0]
        gates[1].set()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await calls[1]
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert (
        hashlib.sha256((models_dir / f"{name}.onnx").read_bytes()).hexdigest() == first.model.sha256
    )


def test_gating_decision_logic() -> None:
    common = dict(games_target=400, elo_threshold=20.0, release_every_steps=10_000, use_sprt=False)
    assert (
        gating_decision(100, 100, 0, candidate_steps=5000, reference_steps=1000, **common)
        == "pending"
    )
    assert (
        gating_decision(230, 170, 0, candidate_steps=5000, reference_steps=1000, **common)
        == "released"
    )  # +52 Elo
    assert (
        gating_decision(205, 195, 0, candidate_steps=5000, reference_steps=1000, **common)
        == "rejected"
    )  # +8.7 Elo
    # a new multiple of release_every_steps lowers the bar to beating the reference, no lower
    milestone = dict(candidate_steps=10_000, reference_steps=9_000, **common)
    assert gating_decision(201, 199, 0, **milestone) == "released"
    assert gating_decision(150, 250, 0, **milestone) == "rejected"
    assert gating_decision(200, 200, 0, **milestone) == "rejected"
    # a negative threshold never releases a model that lost
    loose = {**common, "elo_threshold": -50.0}
    assert (
        gating_decision(190, 210, 0, candidate_steps=5000, reference_steps=1000, **loose)
        == "rejected"
    )
    sprt = {**common, "use_sprt": True}
    assert (
        gating_decision(150, 50, 0, candidate_steps=5000, reference_steps=1000, **sprt)
        == "released"
    )
    assert (
        gating_decision(50, 150, 0, candidate_steps=5000, reference_steps=1000, **sprt)
        == "rejected"
    )
    assert (
        gating_decision(12, 8, 0, candidate_steps=5000, reference_steps=1000, **sprt) == "pending"
    )


def test_curriculum_stages() -> None:
    cur = (
        CurriculumStage(100_000, 9, 200),
        CurriculumStage(500_000, 13, 400),
        CurriculumStage(0, 19, 800),
    )
    assert stage_for(0, cur).board_size == 9
    assert stage_for(99_999, cur).visits == 200
    assert stage_for(100_000, cur) == CurriculumStage(500_000, 13, 400)
    assert stage_for(10**9, cur).board_size == 19


async def test_gating_match_flow_and_curriculum_switch(coordinator_factory) -> None:
    coord = await coordinator_factory(
        gating_games=4, match_chunk_games=2, curriculum="1000:9:50,0:13:80"
    )
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id="w"))
        assert task.WhichOneof("kind") == "retry_after_s"
        w = (await stub.Register(coordinator_pb2.RegisterRequest(username="t"))).worker_id
        watch = stub.WatchModels(coordinator_pb2.WatchModelsRequest())
        await publish(coord, "kg-b2c16-s0-d0")
        assert (await watch.read()).model.name == "kg-b2c16-s0-d0"
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id="w"))
        assert task.selfplay.model == "kg-b2c16-s0-d0" and (task.board_size, task.visits) == (9, 50)
        # The game's move cap itself: min(max_moves, max_moves_per_point * N * N).
        assert task.max_moves == move_cap(9, coord.app.cfg.max_moves, 2.0) == 162
        resp = await publish(coord, "kg-b2c16-s2000-d100")
        assert resp.gating_scheduled and resp.model.status == common_pb2.MODEL_STATUS_CANDIDATE
        tasks = [await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w)) for _ in range(3)]
        assert [t.WhichOneof("kind") for t in tasks] == [
            "match",
            "match",
            "selfplay",
        ]  # 2 chunks of 2 = 4 games
        m = tasks[0].match
        assert (m.candidate_model, m.reference_model, m.games) == (
            "kg-b2c16-s2000-d100",
            "kg-b2c16-s0-d0",
            2,
        )
        B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE

        def report(task, games):
            return stub.ReportMatchResult(
                coordinator_pb2.ReportMatchResultRequest(
                    task_id=task.task_id,
                    worker_id=w,
                    candidate_model=task.match.candidate_model,
                    reference_model=task.match.reference_model,
                    games=[
                        match_game(task, c, win == c, i, game_id=g)
                        for i, (g, c, win) in enumerate(games)
                    ],
                )
            )

        r1 = await report(tasks[0], [("g1", B, B), ("g2", W, W)])
        assert (r1.games_recorded, r1.decision) == (2, "pending")
        r1b = await report(tasks[0], [("g1", B, B), ("g2", W, W)])  # idempotent
        assert (r1b.games_recorded, r1b.decision) == (0, "pending")
        r2 = await report(tasks[1], [("g3", B, B), ("g4", W, B)])
        assert (r2.games_recorded, r2.decision) == (2, "released")
        assert (await watch.read()).model.name == "kg-b2c16-s2000-d100"
        watch.cancel()
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
        (match,) = stats.matches
        assert (match.wins, match.losses, match.draws, match.decision) == (3, 1, 0, "released")
        assert match.elo_low < match.elo_diff < match.elo_high
        released = {m.name: m for m in stats.models}["kg-b2c16-s2000-d100"]
        assert released.elo == pytest.approx(match.elo_diff)
        # curriculum: the released model has 2000 steps -> stage 2
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id="w"))
        assert task.selfplay.model == "kg-b2c16-s2000-d100" and (task.board_size, task.visits) == (
            13,
            80,
        )


@pytest.mark.parametrize(
    "field,value,fragment",
    [
        ("score", float("nan"), "score must be finite"),
        ("score", float("inf"), "score must be finite"),
        ("winner", 7, "winner must be"),
    ],
)
async def test_bad_match_results_are_invalid_argument(
    coordinator_factory, field, value, fragment
) -> None:
    # The report's own figures are checked where records are optional (with records, the
    # replay's figures are counted: tests/test_gating_forgery.py).
    coord = await coordinator_factory(
        gating_games=4, match_chunk_games=2, match_records_required=False
    )
    await publish(coord, "kg-b2c16-s0-d0")
    await publish(coord, "kg-b2c16-s2000-d100")
    B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
    good = coordinator_pb2.MatchGame(game_id="g1", candidate_color=B, winner=B, score=3.5, moves=60)
    bad = coordinator_pb2.MatchGame(game_id="g2", candidate_color=W, winner=B, score=-3.5, moves=60)
    setattr(bad, field, value)
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w = (await stub.Register(coordinator_pb2.RegisterRequest(username="t"))).worker_id
        task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
        req = coordinator_pb2.ReportMatchResultRequest(
            task_id=task.task_id,
            worker_id=w,
            candidate_model="kg-b2c16-s2000-d100",
            reference_model="kg-b2c16-s0-d0",
            games=[good, bad],
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ReportMatchResult(req)
        assert (
            err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in err.value.details()
        )
        del req.games[1:]
        assert (
            await stub.ReportMatchResult(req)
        ).games_recorded == 1  # nothing of the refused report was kept


async def test_gating_disabled_releases_every_publish(coordinator_factory) -> None:
    coord = await coordinator_factory(gating_enabled=False)
    await publish(coord, "kg-b2c16-s0-d0")
    resp = await publish(coord, "kg-b2c16-s10-d5")
    assert not resp.gating_scheduled and resp.model.status == common_pb2.MODEL_STATUS_RELEASED


# ---------------------------------------------------------------------- access control
async def test_auth_refusals(coordinator) -> None:
    async with coordinator.channel(None) as ch:  # no token
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for call in (
            stub.GetStats(coordinator_pb2.GetStatsRequest()),
            stub.UploadGames(iter([])),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert (
                err.value.code() == grpc.StatusCode.UNAUTHENTICATED
                and "missing token" in err.value.details()
            )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.WatchModels(coordinator_pb2.WatchModelsRequest()):
                pass
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetStats(
                coordinator_pb2.GetStatsRequest(), metadata=(("authorization", "Bearer kgt_wrong"),)
            )
        assert (
            err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "unknown" in err.value.details()
        )
    async with coordinator.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.PublishModel(iter(publish_requests("kg-b2c16-s0-d0", b"abc")))
        assert (
            err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            and "trainer token" in err.value.details()
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListShards(coordinator_pb2.ListShardsRequest())
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert (await stub.GetStats(coordinator_pb2.GetStatsRequest())).run == "run_001"
    # revocation takes effect on the next call
    from kgrpc.coordinator import auth, db

    conn = db.connect(coordinator.data_dir, index=coordinator.app.cfg.index)
    assert auth.revoke_token(conn, token=coordinator.worker_token)
    conn.close()
    async with coordinator.channel("worker") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
                coordinator_pb2.GetStatsRequest()
            )
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # health needs no token
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with coordinator.channel(None) as ch:
        h = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="kgrpc.v1.Coordinator")
        )
        assert h.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl CLI for a self-signed certificate"
)
async def test_tls(coordinator_factory, tmp_path) -> None:
    key, cert = self_signed_cert(tmp_path)
    coord = await coordinator_factory(tls_cert=str(cert), tls_key=str(key))
    async with coord.channel("worker") as ch:
        stats = await coordinator_pb2_grpc.CoordinatorStub(ch).GetStats(
            coordinator_pb2.GetStatsRequest(), timeout=10
        )
        assert stats.run == "run_001"
    from kgrpc.net import make_channel

    async with make_channel(
        coord.address, token=coord.worker_token
    ) as plain:  # plaintext to a TLS port fails
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await coordinator_pb2_grpc.CoordinatorStub(plain).GetStats(
                coordinator_pb2.GetStatsRequest(), timeout=3
            )
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    await asyncio.sleep(0)


async def test_silent_match_chunk_is_reissued_after_timeout(coordinator_factory) -> None:
    timeout = 0.3
    coord = await coordinator_factory(
        gating_games=2, match_chunk_games=2, match_task_timeout_s=timeout
    )
    await publish(coord, "kg-b2c16-s0-d0")
    await publish(coord, "kg-b2c16-s5-d10")
    B, W = common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        silent, other_w = [
            (await stub.Register(coordinator_pb2.RegisterRequest(username=u))).worker_id
            for u in ("s", "o")
        ]
        t0 = loop_time()
        first = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=silent))
        assert first.WhichOneof("kind") == "match" and first.match.games == 2
        other = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=other_w))
        if loop_time() - t0 < timeout:  # all games are out and the chunk is still fresh
            assert other.WhichOneof("kind") == "selfplay"
        # w-silent never reports: its chunk goes to the next worker asking once it is stale
        for _ in range(200):
            if other.WhichOneof("kind") == "match":
                break
            await asyncio.sleep(0.05)
            other = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=other_w))
        assert other.WhichOneof("kind") == "match", "stale match chunk was never handed out again"
        assert other.task_id != first.task_id
        assert (other.match.candidate_model, other.match.reference_model, other.match.games) == (
            "kg-b2c16-s5-d10",
            "kg-b2c16-s0-d0",
            2,
        )
        r = await stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=other.task_id,
                worker_id=other_w,
                candidate_model=other.match.candidate_model,
                reference_model=other.match.reference_model,
                games=[
                    match_game(other, c, True, i, game_id=g)
                    for i, (g, c) in enumerate((("o1", B), ("o2", W)))
                ],
            )
        )
        assert (r.games_recorded, r.decision) == (2, "released")
        # the silent worker turning up late changes nothing
        late = await stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=first.task_id,
                worker_id=silent,
                candidate_model=first.match.candidate_model,
                reference_model=first.match.reference_model,
                games=[match_game(first, B, False, 9, game_id="s1")],
            )
        )
        assert late.decision == "released"
        (match,) = (await stub.GetStats(coordinator_pb2.GetStatsRequest())).matches
        assert match.decision == "released" and match.wins == 2
        assert (await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=silent))).WhichOneof(
            "kind"
        ) == "selfplay"


def loop_time() -> float:
    return asyncio.get_running_loop().time()


async def test_reporting_part_of_a_chunk_does_not_hand_its_games_out_again(
    coordinator_factory,
) -> None:
    # Workers report game by game; a chunk half reported is still out, so the match is not
    # over-issued (it was: 24 games played for a 16-game match).
    coord = await coordinator_factory(gating_games=4, match_chunk_games=2)
    await publish(coord, "kg-b2c16-s0-d0")
    await publish(coord, "kg-b2c16-s5-d10")
    B = common_pb2.COLOR_BLACK
    async with coord.channel("worker") as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        w = (await stub.Register(coordinator_pb2.RegisterRequest(username="a"))).worker_id
        chunks = [await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w)) for _ in range(2)]
        assert [c.WhichOneof("kind") for c in chunks] == ["match", "match"]
        c = chunks[0]
        await stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=c.task_id,
                worker_id=w,
                candidate_model=c.match.candidate_model,
                reference_model=c.match.reference_model,
                games=[match_game(c, B, True, game_id="g1")],
            )
        )
        after = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
        assert after.WhichOneof("kind") == "selfplay"  # 1 recorded + 3 still out = 4
