"""Games kept as SGF: which are kept, what a match report's record must agree with, what a
failed write costs (nothing but the SGF), and the read-side helpers (rates, the viewer)."""

from __future__ import annotations

import asyncio
import ctypes
import sys
from pathlib import Path

import grpc
import pytest

from kgrpc import durable
from kgrpc.coordinator import archive, db, kept_games, sgf_index, views
from kgrpc.coordinator.store import GameOutcome
from kgrpc.coordinator.testing import upload_requests
from kgrpc.coordinator.web.boardview import viewer_data
from kgrpc.durable import sync_files, write_unsynced
from kgrpc.randgame import make_random_game, make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.dashboard_helpers import FIRST, SECOND, match_game, publish

GATED = dict(gating_games=4, match_chunk_games=4)


async def upload(coord, games):  # type: ignore[no-untyped-def]
    await coord.store_tasks_for(games)
    async with coord.channel("worker") as ch:
        return await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(
            iter(upload_requests(games))
        )


def kept_ids(data_dir: Path) -> set[str]:
    return {p.stem for p in (data_dir / "sgf").rglob("*.sgf")}


async def test_share_of_selfplay_games_is_chosen_by_game_id(coordinator_factory) -> None:
    coord = await coordinator_factory(sgf_share=0.5)
    games = make_random_games(16, 9, seed=900)
    assert (await upload(coord, games)).accepted == 16
    await coord.app.archive.drain()
    want = {g.game_id for g in games if kept_games.selected(g.game_id, 0.5)}
    assert 0 < len(want) < 16
    assert kept_ids(coord.data_dir) == want
    none = await coordinator_factory(sgf_share=0.0)
    await upload(none, games[:3])
    await none.app.archive.drain()
    assert not (none.data_dir / "sgf").exists()


async def match_setup(coord):  # type: ignore[no-untyped-def]
    await publish(coord, FIRST)
    await publish(coord, SECOND)
    ch = coord.channel("worker")
    stub = coordinator_pb2_grpc.CoordinatorStub(ch)
    w = (await stub.Register(coordinator_pb2.RegisterRequest(username="u"))).worker_id
    task = await stub.GetTask(coordinator_pb2.GetTaskRequest(worker_id=w))
    assert task.match.games == 4

    def report(games):  # type: ignore[no-untyped-def]
        return stub.ReportMatchResult(
            coordinator_pb2.ReportMatchResultRequest(
                task_id=task.task_id,
                worker_id=w,
                candidate_model=SECOND,
                reference_model=FIRST,
                games=games,
            )
        )

    return ch, report, task.task_id


@pytest.mark.parametrize(
    "spoil,fragment",
    [
        (lambda g: setattr(g, "winner", 3 - g.winner), "has winner"),
        (lambda g: setattr(g, "moves", g.moves + 1), "moves, the report"),
        (lambda g: setattr(g.record, "game_id", "other"), "has game_id"),
        (lambda g: setattr(g.record, "black_model", "someone-else"), "names black"),
        # Checked against the stored match task: played with another komi, or for another task.
        (lambda g: setattr(g.record, "komi", 6.5), "does not fit its task"),
        (lambda g: setattr(g.record, "task_id", "match-0-x"), "does not fit its task"),
    ],
)
@pytest.mark.slow
async def test_a_record_that_contradicts_its_report_is_invalid(
    coordinator_factory, spoil, fragment
) -> None:
    coord = await coordinator_factory(**GATED)
    ch, report, task_id = await match_setup(coord)
    async with ch:
        _, good = match_game(1, SECOND, FIRST, task_id)
        _, bad = match_game(2, SECOND, FIRST, task_id)
        spoil(bad)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await report([good, bad])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert fragment in err.value.details()
        assert (await report([good])).games_recorded == 1  # nothing of the refused one was kept
    await coord.app.archive.drain()
    assert kept_ids(coord.data_dir) == {good.game_id}


@pytest.mark.slow
async def test_a_record_that_does_not_replay_counts_but_is_not_kept(coordinator_factory) -> None:
    # Only where records are optional (a trusted setup); by default such a report is refused
    # (tests/test_gating_forgery.py).
    coord = await coordinator_factory(match_records_required=False, **GATED)
    ch, report, task_id = await match_setup(coord)
    async with ch:
        _, good = match_game(3, SECOND, FIRST, task_id)
        _, bad = match_game(4, SECOND, FIRST, task_id)
        bad.record.moves[5] = bad.record.moves[4]  # an occupied point
        assert (await report([good, bad])).games_recorded == 2
        again = await report([good])  # reported again: recorded once, written once
        assert again.games_recorded == 0
    await coord.app.archive.drain()
    assert kept_ids(coord.data_dir) == {good.game_id}
    assert coord.app.archive.refused_records == 1
    assert coord.app.archive.written["gating"] == 1


async def test_a_file_cut_short_by_a_crash_is_never_listed_and_is_rewritten(
    coordinator_factory,
) -> None:
    coord = await coordinator_factory()
    game = make_random_game(9, seed=77)
    path = (
        coord.data_dir
        / "sgf"
        / kept_games.safe_name(game.black_model)
        / "selfplay"
        / f"{game.game_id}.sgf"
    )
    path.parent.mkdir(parents=True)
    path.write_text("(;FF[4]GM[1]SZ[9];B[aa")  # written in place, the crash before its row

    async def listed() -> set[str]:
        async with coord.channel("worker") as ch:
            reply = await coordinator_pb2_grpc.CoordinatorStub(ch).ListGames(
                coordinator_pb2.ListGamesRequest()
            )
        return {g.game_id for g in reply.games}

    assert await listed() == set()
    assert (await upload(coord, [game])).accepted == 1
    await coord.app.archive.drain()
    assert await listed() == {game.game_id}
    text = path.read_text()
    assert text.endswith(")\n") and text.count(";B[") + text.count(";W[") == len(game.moves)


async def test_a_failed_sgf_write_never_fails_the_upload(coordinator_factory) -> None:
    coord = await coordinator_factory()
    (coord.data_dir / "sgf").write_text("not a directory")
    games = make_random_games(3, 9, seed=40)
    assert (await upload(coord, games)).accepted == 3
    await coord.app.archive.drain()
    assert coord.app.archive.failures == 1
    (coord.data_dir / "sgf").unlink()
    more = make_random_games(2, 9, seed=60)
    assert (await upload(coord, more)).accepted == 2
    await coord.app.archive.drain()
    assert kept_ids(coord.data_dir) == {g.game_id for g in more}
    async with coord.channel("worker") as ch:
        listed = await coordinator_pb2_grpc.CoordinatorStub(ch).ListGames(
            coordinator_pb2.ListGamesRequest()
        )
    assert {g.game_id for g in listed.games} == {g.game_id for g in more}  # only whole files


async def test_odd_names_never_become_paths(coordinator_factory) -> None:
    coord = await coordinator_factory()
    game = make_random_game(9, seed=5, model="../../etc/passwd", game_id="../x/y")
    assert (await upload(coord, [game])).accepted == 1
    await coord.app.archive.drain()
    (path,) = (coord.data_dir / "sgf").rglob("*.sgf")
    rel = path.relative_to(coord.data_dir / "sgf")
    assert rel.parts[0] == kept_games.safe_name("../../etc/passwd")
    assert rel.parts[0].startswith("x-")
    assert rel.name == kept_games.safe_name("../x/y") + ".sgf"
    async with coord.channel("worker") as ch:
        got = await coordinator_pb2_grpc.CoordinatorStub(ch).DownloadGame(
            coordinator_pb2.DownloadGameRequest(game_id="../x/y")
        )
    assert "PB[../../etc/passwd]" in got.sgf


async def test_a_kept_game_whose_file_is_lost_is_not_found(coordinator_factory) -> None:
    coord = await coordinator_factory()
    game = make_random_game(9, seed=6)
    assert (await upload(coord, [game])).accepted == 1
    await coord.app.archive.drain()
    (path,) = (coord.data_dir / "sgf").rglob("*.sgf")
    path.unlink()  # lost (a disk replaced, a copy without sgf/): listed, not readable
    async with coord.channel("worker") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await coordinator_pb2_grpc.CoordinatorStub(ch).DownloadGame(
                coordinator_pb2.DownloadGameRequest(game_id=game.game_id)
            )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "missing from the archive" in (err.value.details() or "")


async def test_a_full_budget_makes_the_uploader_wait(tmp_path: Path) -> None:
    conn = db.connect(tmp_path)

    async def on_storage(fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(fn, *args)

    arc = archive.GameArchive(tmp_path, 1.0, conn, on_storage, max_pending_bytes=1)
    games = make_random_games(4, 9, seed=70)
    items = [(g.SerializeToString(), GameOutcome(g.game_id, "w", True)) for g in games]
    await arc.keep_selfplay(items[:2])  # alone, it goes whatever its size
    assert arc.pending_bytes == len(items[0][0]) + len(items[1][0])
    await arc.keep_selfplay(items[2:])  # returns once the first batch is written
    assert kept_ids(tmp_path) >= {games[0].game_id, games[1].game_id}
    assert arc.pending_bytes == len(items[2][0]) + len(items[3][0])
    await arc.close()
    assert kept_ids(tmp_path) == {g.game_id for g in games}
    assert {g.game_id for g in sgf_index.list_kept(conn)} == {g.game_id for g in games}
    conn.close()


async def test_validation_renders_the_kept_games_sgf_and_the_archive_uses_it(
    tmp_path: Path,
) -> None:
    """The validation pool renders the SGF of the games the archive keeps (off the event
    loop); the archive writes that rendering without parsing the record again."""
    from kgrpc.coordinator.validate import ValidationSettings, validate_record_bytes

    games = make_random_games(6, 9, seed=71)
    loose = ValidationSettings(require_task=False, sgf_share=0.5)
    outcomes = [validate_record_bytes(g.SerializeToString(), "w", loose) for g in games]
    assert all(o.ok for o in outcomes), [o.detail for o in outcomes]
    for g, o in zip(games, outcomes, strict=True):
        if kept_games.selected(g.game_id, 0.5):
            row, sgf = o.kept
            assert row.game_id == g.game_id and row.worker_id == "w"
            assert sgf == kept_games.prepare(g, "selfplay", g.black_model, "w")[1]
        else:
            assert o.kept is None
    none = ValidationSettings(require_task=False, sgf_share=0.0)
    assert validate_record_bytes(games[0].SerializeToString(), "w", none).kept is None

    conn = db.connect(tmp_path)

    async def on_storage(fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.to_thread(fn, *args)

    arc = archive.GameArchive(tmp_path, 0.5, conn, on_storage)
    # Bytes that do not parse: only the pool's rendering can be written.
    await arc.keep_selfplay([(b"\xff\xff", o) for o in outcomes if o.kept is not None])
    await arc.close()
    want = {g.game_id for g in games if kept_games.selected(g.game_id, 0.5)}
    assert want and kept_ids(tmp_path) == want
    conn.close()


def test_safe_names() -> None:
    assert kept_games.safe_name("kg-b6c96-s100-d2000") == "kg-b6c96-s100-d2000"
    for odd in ("", ".hidden", "a/b", "..", "x" * 65, "a b", "<img>"):
        assert kept_games.safe_name(odd).startswith("x-") and len(kept_games.safe_name(odd)) == 18


@pytest.mark.parametrize("syncfs", [True, False], ids=["syncfs", "fsync-each"])
def test_write_unsynced_then_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syncfs: bool
) -> None:
    if not syncfs:
        monkeypatch.setattr(durable, "_SYNCFS", None)
    old = tmp_path / "a" / "2.sgf"
    old.parent.mkdir()
    old.write_bytes(b"a longer file written before")
    items = [(tmp_path / "a" / "b" / "1.sgf", b"one"), (old, b"two"), (tmp_path / "c" / "3", b"")]
    dirs = write_unsynced(items)
    assert dirs == {tmp_path, tmp_path / "a", tmp_path / "a" / "b", tmp_path / "c"}
    sync_files([p for p, _ in items], dirs)
    assert [p.read_bytes() for p, _ in items] == [b"one", b"two", b""]  # the old file truncated
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["1.sgf", "2.sgf", "3"]


def test_syncfs_is_used_on_linux_and_its_error_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert durable.syncfs_available() == sys.platform.startswith("linux")
    calls: list[int] = []

    def failing(fd: int) -> int:
        calls.append(fd)
        ctypes.set_errno(5)  # EIO: a write-back error the caller must see
        return -1

    monkeypatch.setattr(durable, "_SYNCFS", failing)
    path = tmp_path / "x.sgf"
    dirs = write_unsynced([(path, b"x")])
    with pytest.raises(OSError, match="syncfs"):
        sync_files([path], dirs)
    assert len(calls) == 1  # one call for the whole file system, not one per file


def test_viewer_replays_captures() -> None:
    # 3x3: white's B1 (point 7) is surrounded by black's B2, A1 and finally C1.
    sgf = "(;SZ[3]KM[0];B[bb];W[bc];B[ac];W[aa];B[cc]KGV[0.5]KGN[10];W[])"
    data = viewer_data(sgf)
    assert [m["point"] for m in data["moves"]] == [4, 7, 6, 0, 8, None]
    assert data["moves"][4]["captures"] == [7]
    assert data["moves"][4]["value"] == 0.5 and data["moves"][4]["visits"] == 10
    assert all(m["captures"] == [] for i, m in enumerate(data["moves"]) if i != 4)


@pytest.mark.slow
def test_rates_find_the_window_by_binary_search(tmp_path: Path) -> None:
    conn = db.connect(tmp_path)
    now = 1_000_000_000
    # 1000 games, one every second, the last one at `now`; positions 10 each.
    conn.executemany(
        "INSERT INTO games (game_id, worker_id, run, board_size, positions, accepted_ms) "
        "VALUES (?, 'w', 'r', 9, 10, ?)",
        [(f"g{i}", now - (999 - i) * 1000) for i in range(1000)],
    )
    games, positions = views.rates(conn, 100.0, now)
    assert games == pytest.approx(101 / 100) and positions == pytest.approx(1010 / 100)
    assert views.rates(conn, 0, now) == (0.0, 0.0)
    assert views.rates(db.connect(tmp_path / "empty"), 60, now) == (0.0, 0.0)
