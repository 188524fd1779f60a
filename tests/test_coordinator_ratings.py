"""ReportRating / ListRatings / GetStats' ratings on a real coordinator on loopback: what is
stored and computed, who may report, bad input, an older database, `kgrpc-coordinator stats`."""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path

import grpc
import pytest

from kgrpc import elo
from kgrpc.coordinator import db
from kgrpc.coordinator.testing import RunningCoordinator, start_coordinator, upload_request
from kgrpc.go.rules import CHINESE, Rules
from kgrpc.randgame import make_random_game
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

pytest.importorskip("onnxruntime")

FIRST = "kg-b1c8-s0-d0"
SECOND = "kg-b1c8-s120-d6000"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    from trainer.export import init_model

    folder = tmp_path_factory.mktemp("models")
    out = {}
    for seed, name in enumerate((FIRST, SECOND)):
        out[name] = folder / f"{name}.onnx"
        init_model((5, 9), 1, 8, out[name], name=name, seed=seed)
    return out


async def publish(coord, path: Path) -> None:  # type: ignore[no-untyped-def]
    from trainer.publish import publish_model

    await publish_model(coord.address, coord.trainer_token, path)


async def upload_games(coord, seeds: range) -> None:  # type: ignore[no-untyped-def]
    async with coord.channel("worker") as ch:
        games = [make_random_game(9, seed=s) for s in seeds]
        await coord.store_tasks_for(games)
        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter([upload_request(games)])
        )
    assert resp.accepted == len(games)


def report(
    model: str = SECOND,
    opponent: str = "random",
    wins: int = 3,
    losses: int = 1,
    draws: int = 0,
    visits: int = 16,
    board_size: int = 9,
    komi: float = 7.5,
    rules: common_pb2.Rules | None = None,
    distinct_games: int = 0,
) -> coordinator_pb2.ReportRatingRequest:
    return coordinator_pb2.ReportRatingRequest(
        model=model,
        opponent=opponent,
        wins=wins,
        losses=losses,
        draws=draws,
        visits=visits,
        board_size=board_size,
        komi=komi,
        rules=rules if rules is not None else CHINESE.to_proto(),
        distinct_games=distinct_games,
    )


async def run_with_two_models(tmp_path: Path, model_files: dict[str, Path]) -> RunningCoordinator:
    """A coordinator that accepted 3 games, took FIRST, accepted 2 more, took SECOND."""
    coord = await start_coordinator(tmp_path, gating_enabled=False)
    await upload_games(coord, range(3))
    await publish(coord, model_files[FIRST])
    await asyncio.sleep(0.01)  # accepted_ms of the next games is later than FIRST's creation
    await upload_games(coord, range(3, 5))
    await asyncio.sleep(0.01)
    await publish(coord, model_files[SECOND])
    await upload_games(coord, range(5, 7))  # after both: counted for neither
    return coord


async def test_report_list_and_stats(tmp_path: Path, model_files: dict[str, Path]) -> None:
    coord = await run_with_two_models(tmp_path, model_files)
    try:
        async with coord.channel("trainer") as tch, coord.channel("worker") as wch:
            trainer = coordinator_pb2_grpc.CoordinatorStub(tch)
            worker = coordinator_pb2_grpc.CoordinatorStub(wch)
            models = {
                m.name: m
                for m in (await worker.ListModels(coordinator_pb2.ListModelsRequest())).models
            }

            got = (await trainer.ReportRating(report(wins=3, losses=1, draws=0))).rating
            est = elo.elo_interval(3, 1, 0)
            low, high = elo.wilson_interval(est.rate, 4)
            assert (got.model, got.opponent, got.games, got.wins, got.losses, got.draws) == (
                SECOND,
                "random",
                4,
                3,
                1,
                0,
            )
            assert got.win_rate == pytest.approx(0.75) and got.elo == pytest.approx(est.elo)
            assert (got.elo_low, got.elo_high) == (pytest.approx(est.low), pytest.approx(est.high))
            assert (got.win_low, got.win_high) == (pytest.approx(low), pytest.approx(high))
            assert (got.training_steps, got.training_rows) == (120, 6000)
            assert got.selfplay_games == 5  # games accepted before SECOND was taken
            wall = (models[SECOND].created_unix_ms - models[FIRST].created_unix_ms) / 1000
            assert got.wall_seconds == pytest.approx(wall) and got.wall_seconds > 0
            assert got.model_created_unix_ms == models[SECOND].created_unix_ms
            assert (got.visits, got.board_size, got.komi) == (16, 9, 7.5)
            assert Rules.from_proto(got.rules) == CHINESE and got.reported_unix_ms > 0

            # The same report again: the same stored rating, nothing new.
            again = (await trainer.ReportRating(report(wins=3, losses=1, draws=0))).rating
            assert again == got
            # A perfect score: open upper end, a number (inf), not text.
            first = (await trainer.ReportRating(report(model=FIRST, wins=2, losses=0))).rating
            assert math.isinf(first.elo_high) and first.elo_high > 0
            assert first.selfplay_games == 3 and first.wall_seconds == 0
            # Same settings, another result: replaced. Other settings (8 games): a new rating.
            await asyncio.sleep(0.01)
            replaced = (await trainer.ReportRating(report(wins=1, losses=3))).rating
            assert (replaced.wins, replaced.losses) == (1, 3)
            assert replaced.reported_unix_ms >= got.reported_unix_ms
            await asyncio.sleep(0.01)
            longer = (await trainer.ReportRating(report(wins=6, losses=2))).rating
            vs_first = (
                await trainer.ReportRating(report(opponent="first", wins=2, losses=2, draws=0))
            ).rating

            listed = await worker.ListRatings(coordinator_pb2.ListRatingsRequest())
            assert not listed.truncated
            # Ladder order: FIRST before SECOND, then opponent, then report time.
            assert [(r.model, r.opponent, r.games) for r in listed.ratings] == [
                (FIRST, "random", 2),
                (SECOND, "first", 4),
                (SECOND, "random", 4),
                (SECOND, "random", 8),
            ]
            assert listed.ratings[2] == replaced and listed.ratings[3] == longer
            latest = await worker.ListRatings(coordinator_pb2.ListRatingsRequest(latest_only=True))
            assert list(latest.ratings) == [first, vs_first, longer]
            only = await worker.ListRatings(
                coordinator_pb2.ListRatingsRequest(model=SECOND, opponent="random")
            )
            assert [r.games for r in only.ratings] == [4, 8]
            newest = await worker.ListRatings(coordinator_pb2.ListRatingsRequest(limit=1))
            assert list(newest.ratings) == [vs_first] and newest.truncated
            none = await worker.ListRatings(coordinator_pb2.ListRatingsRequest(model="nobody"))
            assert list(none.ratings) == [] and not none.truncated

            stats = await worker.GetStats(coordinator_pb2.GetStatsRequest())
            assert list(stats.ratings) == [first, vs_first, longer]
        conn = db.connect(coord.data_dir, readonly=True)
        try:
            (rows,) = conn.execute("SELECT COUNT(*) FROM ratings").fetchone()
            tokens = {r[0] for r in conn.execute("SELECT token_id FROM ratings")}
            (trainer_id,) = conn.execute("SELECT id FROM tokens WHERE role = 'trainer'").fetchone()
        finally:
            conn.close()
        assert rows == 4 and tokens == {trainer_id}
    finally:
        await coord.stop()


async def test_roles(tmp_path: Path, model_files: dict[str, Path]) -> None:
    coord = await start_coordinator(tmp_path, gating_enabled=False)
    try:
        await publish(coord, model_files[FIRST])
        async with coord.channel("worker") as wch, coord.channel(None) as nch:
            worker = coordinator_pb2_grpc.CoordinatorStub(wch)
            nobody = coordinator_pb2_grpc.CoordinatorStub(nch)
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await worker.ReportRating(report(model=FIRST))
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "ReportRating needs a trainer token" in denied.value.details()
            for call in (
                nobody.ReportRating(report(model=FIRST)),
                nobody.ListRatings(coordinator_pb2.ListRatingsRequest()),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as unauth:
                    await call
                assert unauth.value.code() == grpc.StatusCode.UNAUTHENTICATED
            listed = await worker.ListRatings(coordinator_pb2.ListRatingsRequest())
            assert list(listed.ratings) == []
    finally:
        await coord.stop()


BAD_REPORTS = [
    (dict(model=""), "INVALID_ARGUMENT", "model is empty"),
    (dict(model="kg-b1c8-s9-d9"), "NOT_FOUND", "no model 'kg-b1c8-s9-d9'"),
    (
        dict(model="m" * 201),
        "INVALID_ARGUMENT",
        "ReportRatingRequest.model has 201 characters; the limit is 200",
    ),
    (
        dict(opponent="x" * 65),
        "INVALID_ARGUMENT",
        "ReportRatingRequest.opponent has 65 characters; the limit is 64",
    ),
    (dict(opponent=""), "INVALID_ARGUMENT", "opponent ''"),
    (dict(opponent="gnu go"), "INVALID_ARGUMENT", "opponent 'gnu go': expected letters"),
    (dict(opponent="../x"), "INVALID_ARGUMENT", "expected letters, digits"),
    (dict(wins=-1), "INVALID_ARGUMENT", "negative game count: wins -1"),
    (dict(wins=0, losses=0, draws=0), "INVALID_ARGUMENT", "no games"),
    (dict(visits=0), "INVALID_ARGUMENT", "visits must be >= 1, got 0"),
    (dict(distinct_games=-1), "INVALID_ARGUMENT", "distinct_games -1 out of range 0..4"),
    (dict(distinct_games=5), "INVALID_ARGUMENT", "distinct_games 5 out of range 0..4"),
    (dict(board_size=1), "INVALID_ARGUMENT", "board_size 1 out of range 2..19"),
    (dict(board_size=25), "INVALID_ARGUMENT", "board_size 25 out of range"),
    (dict(komi=math.nan), "INVALID_ARGUMENT", "komi nan is not a finite number"),
    (dict(komi=math.inf), "INVALID_ARGUMENT", "komi inf"),
    (dict(komi=200.0), "INVALID_ARGUMENT", "komi 200.0"),
    (dict(rules=common_pb2.Rules()), "INVALID_ARGUMENT", "rules.scoring is unspecified"),
]
BAD_LISTS = [
    (dict(limit=-1), "limit must be >= 0, got -1"),
    (dict(model="m" * 201), "ListRatingsRequest.model has 201 characters; the limit is 200"),
    (dict(opponent="o" * 65), "ListRatingsRequest.opponent has 65 characters; the limit is 64"),
]


async def test_bad_input_is_refused_and_nothing_is_stored(
    tmp_path: Path, model_files: dict[str, Path]
) -> None:
    coord = await start_coordinator(tmp_path, gating_enabled=False)
    try:
        await publish(coord, model_files[FIRST])
        async with coord.channel("trainer") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            for fields, code, message in BAD_REPORTS:
                kwargs = {"model": FIRST, **fields}
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.ReportRating(report(**kwargs))
                assert err.value.code().name == code, fields
                assert message in err.value.details(), (fields, err.value.details())
            for fields, message in BAD_LISTS:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.ListRatings(coordinator_pb2.ListRatingsRequest(**fields))
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert message in err.value.details()
            listed = await stub.ListRatings(coordinator_pb2.ListRatingsRequest())
            assert list(listed.ratings) == []
            # A custom rule set (no preset) is stored and given back as it came.
            custom = Rules("area", "positional", False)
            r = (await stub.ReportRating(report(model=FIRST, rules=custom.to_proto()))).rating
            assert Rules.from_proto(r.rules) == custom
    finally:
        await coord.stop()


async def test_distinct_games_are_stored_listed_and_read_by_the_ladder(
    model_files: dict[str, Path], coordinator_factory
) -> None:  # type: ignore[no-untyped-def]
    # coordinator_factory: on PostgreSQL too with KGRPC_TEST_INDEX=postgresql.
    from kgrpc.programs.eval.ladder_record import LadderRecord

    coord = await coordinator_factory(gating_enabled=False)
    await publish(coord, model_files[FIRST])
    async with coord.channel("trainer") as tch, coord.channel("worker") as wch:
        trainer = coordinator_pb2_grpc.CoordinatorStub(tch)
        worker = coordinator_pb2_grpc.CoordinatorStub(wch)
        got = (await trainer.ReportRating(report(model=FIRST, distinct_games=3))).rating
        assert (got.games, got.distinct_games) == (4, 3)
        # A reporter that did not count them (0): stored as not counted, None in the ladder.
        older = (await trainer.ReportRating(report(model=FIRST, opponent="first"))).rating
        assert older.distinct_games == 0
        listed = (await worker.ListRatings(coordinator_pb2.ListRatingsRequest())).ratings
        assert {r.opponent: r.distinct_games for r in listed} == {"random": 3, "first": 0}
        stats = await worker.GetStats(coordinator_pb2.GetStatsRequest())
        records = {r.opponent: LadderRecord.from_proto(r) for r in stats.ratings}
        assert (records["random"].distinct_games, records["first"].distinct_games) == (3, None)
        # The same W-L-D with another count (the match played again): replaced, not added.
        again = (await trainer.ReportRating(report(model=FIRST, distinct_games=4))).rating
        assert (again.wins, again.losses, again.distinct_games) == (3, 1, 4)
        listed = (await worker.ListRatings(coordinator_pb2.ListRatingsRequest())).ratings
        assert sorted((r.opponent, r.distinct_games) for r in listed) == [
            ("first", 0),
            ("random", 4),
        ]


async def test_an_older_ratings_table_gains_distinct_games(
    tmp_path: Path, model_files: dict[str, Path]
) -> None:
    data_dir = tmp_path / "coordinator"
    conn = db.connect(data_dir)
    conn.execute("ALTER TABLE ratings DROP COLUMN distinct_games")  # as before the column
    assert "distinct_games" not in {r[1] for r in conn.execute("PRAGMA table_info(ratings)")}
    conn.close()
    coord = await start_coordinator(tmp_path, gating_enabled=False)
    try:
        await publish(coord, model_files[FIRST])
        async with coord.channel("trainer") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            got = await stub.ReportRating(report(model=FIRST, distinct_games=2))
            assert got.rating.distinct_games == 2
    finally:
        await coord.stop()


async def test_an_older_database_gains_the_ratings_table(
    tmp_path: Path, model_files: dict[str, Path]
) -> None:
    data_dir = tmp_path / "coordinator"
    conn = db.connect(data_dir)
    conn.execute("DROP TABLE ratings")  # as a database written before ratings existed
    conn.close()
    coord = await start_coordinator(tmp_path, gating_enabled=False)
    try:
        await publish(coord, model_files[FIRST])
        async with coord.channel("trainer") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            await stub.ReportRating(report(model=FIRST))
            assert len((await stub.ListRatings(coordinator_pb2.ListRatingsRequest())).ratings) == 1
    finally:
        await coord.stop()


@pytest.mark.slow
async def test_stats_command_shows_the_ladder(tmp_path: Path, model_files: dict[str, Path]) -> None:
    coord = await run_with_two_models(tmp_path, model_files)
    try:
        async with coord.channel("trainer") as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            await stub.ReportRating(report(model=FIRST, wins=2, losses=0))
            await stub.ReportRating(report(wins=3, losses=1))
            await stub.ReportRating(report(opponent="gnugo-l1", wins=0, losses=4))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kgrpc.coordinator",
            "stats",
            "--coordinator",
            coord.address,
            "--token",
            coord.worker_token,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await coord.stop()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    at = lines.index("ladder: Elo against fixed references [95% interval] W-L-D")
    header, first, second = lines[at + 1 : at + 4]
    assert header.split() == ["model", "steps", "games", "random", "gnugo-l1"]
    perfect, good, lost = (elo.elo_interval(*wld) for wld in ((2, 0, 0), (3, 1, 0), (0, 4, 0)))
    assert first.split() == [
        FIRST,
        "0",
        "3",
        f"{perfect.elo:+.0f}",
        f"[{perfect.low:+.0f},+inf]",
        "2-0-0",
        "-",
    ]
    assert second.split() == [
        SECOND,
        "120",
        "5",
        f"{good.elo:+.0f}",
        f"[{good.low:+.0f},{good.high:+.0f}]",
        "3-1-0",
        f"{lost.elo:+.0f}",
        f"[-inf,{lost.high:+.0f}]",
        "0-4-0",
    ]
