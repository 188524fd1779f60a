"""Bounded resources under attack, against a real coordinator (issue 11 items 1-5, 16).

Memory is read from the daemon's RSS: the coordinator runs as a subprocess (``psutil`` on its
pid) with small limits, so the tests stay fast and an attack that leaks shows at once.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest
import pytest_asyncio
import zstandard

from kgrpc.coordinator import auth, db
from kgrpc.coordinator.testing import (
    start_coordinator,
    store_tasks,
    terms_for_games,
    upload_request,
)
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_game, make_random_games
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc, records_pb2

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MB = 1 << 20
ACCEPTED = coordinator_pb2.GAME_STATUS_ACCEPTED


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


class Daemon:
    """A ``kgrpc-coordinator`` process on 127.0.0.1:0 with a worker token."""

    def __init__(self, proc: subprocess.Popen, address: str, token: str, data_dir: Path) -> None:
        self.proc = proc
        self.address = address
        self.token = token
        self.data_dir = data_dir
        self.ps = psutil.Process(proc.pid)

    def rss_mb(self) -> float:
        return self.ps.memory_info().rss / MB

    def channel(self, **kwargs) -> grpc.aio.Channel:  # type: ignore[no-untyped-def]
        return make_channel(self.address, token=self.token, **kwargs)

    async def settle(self, above_mb: float, within_s: float) -> float:
        """Wait until RSS is at most ``above_mb`` (or ``within_s`` passed); the last RSS."""
        rss = self.rss_mb()
        for _ in range(int(within_s * 10)):
            if rss <= above_mb:
                break
            await asyncio.sleep(0.1)
            rss = self.rss_mb()
        return rss


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "kgrpc.coordinator", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


async def start_daemon(data_dir: Path, *flags: str) -> Daemon:
    token = cli("token", "create", "--data-dir", str(data_dir), "--role", "worker").stdout.strip()
    port_file = data_dir / "coordinator.port"
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "kgrpc.coordinator",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
            "--log-level",
            "WARNING",
            *flags,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):
        if port_file.exists() or proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
    return Daemon(proc, port_file.read_text().strip(), token, data_dir)


@pytest_asyncio.fixture
async def daemons(tmp_path: Path) -> AsyncIterator:
    started: list[Daemon] = []

    async def start(*flags: str) -> Daemon:
        d = await start_daemon(tmp_path / f"d{len(started)}", *flags)
        started.append(d)
        return d

    yield start
    for d in started:
        d.proc.terminate()
        try:
            d.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            d.proc.kill()
            d.proc.wait()


async def _rss_peak(daemon: Daemon, stop: asyncio.Event) -> float:
    peak = daemon.rss_mb()
    while not stop.is_set():
        peak = max(peak, daemon.rss_mb())
        await asyncio.sleep(0.02)
    return max(peak, daemon.rss_mb())


@pytest.mark.slow
async def test_refused_zstd_bombs_leave_no_memory_behind(daemons) -> None:
    # A message of games of 1.5 MB each expands to 32 MB; the limit is 8 MB. Before the fix each
    # refusal kept its expansion alive (through the abort's exception chain): 50 of them held
    # 400 MB for good.
    d = await daemons("--max-decompressed-mb", "8", "--validate-workers", "-1")
    game = b"\x0a" + _varint(1_500_000) + b"\0" * 1_500_000
    bomb = zstandard.ZstdCompressor().compress(game * 21)
    assert len(bomb) < 10_000
    await asyncio.sleep(0.5)
    idle = d.rss_mb()
    stop = asyncio.Event()
    peak_task = asyncio.ensure_future(_rss_peak(d, stop))
    refused: list[str] = []
    async with d.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)

        async def attacker() -> None:
            for _ in range(10):
                req = coordinator_pb2.UploadGamesRequest(games_zstd=bomb, game_count=21)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.UploadGames(iter([req]))
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                refused.append(err.value.details())

        await asyncio.gather(*(attacker() for _ in range(5)))
        stop.set()
        peak = await peak_task
        after = await d.settle(idle + 16, within_s=30)
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
    assert len(refused) == 50 and all("exceeds 8388608 bytes" in r for r in refused)
    # two messages decompress at once, 8 MB each at most, plus the bytes in flight
    assert peak - idle < 96, (idle, peak)
    assert after - idle < 16, (idle, after)
    assert stats.games_received == 0


@pytest.mark.slow
async def test_a_never_ending_upload_stream_is_cut_and_duplicates_are_not_received(daemons) -> None:
    # One stream re-sending a stored game forever: before, every ack was kept until the stream
    # ended (2.5 GB for 13 MB sent), the reply outgrew the message limit, and each re-send
    # counted as a game received.
    d = await daemons(
        "--max-games-per-message", "10", "--max-games-per-stream", "50", "--validate-workers", "-1"
    )
    game = make_random_game(9, seed=31)
    store_tasks(d.data_dir, terms_for_games([game]))  # read by the daemon at the first upload
    async with d.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        first = await stub.UploadGames(iter([upload_request([game])]))
        assert first.accepted == 1
        await asyncio.sleep(0.5)
        idle = d.rss_mb()
        sent = 0

        async def forever() -> AsyncIterator[coordinator_pb2.UploadGamesRequest]:
            nonlocal sent
            req = upload_request([game] * 7)
            while True:
                sent += 1
                yield req

        stop = asyncio.Event()
        peak_task = asyncio.ensure_future(_rss_peak(d, stop))
        replies = [await stub.UploadGames(forever(), timeout=30) for _ in range(20)]
        stop.set()
        peak = await peak_task
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
    for resp in replies:
        # the message that reaches the limit is taken whole: 8 messages of 7 games
        assert len(resp.acks) == resp.duplicates == 56
        assert {a.game_id for a in resp.acks} == {game.game_id}
    assert sent >= 20 * 8
    assert stats.games_received == 1 and stats.games_accepted == 1
    assert stats.games_duplicate == 20 * 56
    assert peak - idle < 64, (idle, peak)


async def test_game_fields_are_checked_on_the_wire_before_parsing(coordinator) -> None:
    # Each refused game carries something no game of at most max_moves moves has; the scan
    # refuses it from the wire format, and the good game beside them is stored.
    base = make_random_game(9, seed=41)
    good = make_random_game(9, seed=42)

    def variant(i: int) -> records_pb2.GameRecord:
        g = records_pb2.GameRecord()
        g.CopyFrom(base)
        g.game_id = f"{base.game_id[:30]}-{i:05d}"
        return g

    many_targets = variant(1)  # 600 empty targets, well under the per-game byte limit
    del many_targets.moves[:]
    del many_targets.targets[:]
    many_targets.targets.extend(records_pb2.SearchTarget() for _ in range(600))
    one_more = variant(2)
    one_more.targets.add()
    huge_target = variant(3)
    huge_target.targets[0].policy_moves.extend([0] * 2000)
    long_name = variant(4)
    long_name.black_model = "m" * 300
    long_id = variant(5)
    long_id.game_id = "g" * 37
    records = [many_targets, one_more, huge_target, long_name, long_id, good]
    await coordinator.store_tasks_for(records)
    raw = b"".join(b"\x0a" + _varint(r.ByteSize()) + r.SerializeToString() for r in records)
    req = coordinator_pb2.UploadGamesRequest(games_zstd=zstandard.compress(raw), game_count=6)
    async with coordinator.channel() as ch:
        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).UploadGames(iter([req]))
    got = [(a.game_id, a.reason) for a in resp.acks]
    assert got == [
        (many_targets.game_id, "too_long"),
        (one_more.game_id, "targets_mismatch"),
        (huge_target.game_id, "policy_invalid"),
        (long_name.game_id, "field_too_long"),
        ("", "bad_game_id"),
        (good.game_id, ""),
    ]
    assert "black_model is longer than 200 characters" in resp.acks[3].detail
    assert resp.accepted == 1 and resp.rejected == 5


async def test_moves_per_message_are_capped_and_the_rest_sent_again(coordinator_factory) -> None:
    coord = await coordinator_factory(max_moves=200, max_moves_per_message=400)
    games = make_random_games(8, 9, seed=50)
    await coord.store_tasks_for(games)
    assert all(len(g.moves) <= 200 for g in games)
    acked: list[str] = []
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        rounds = 0
        while len(acked) < len(games):  # what a client does with games left without an ack
            rounds += 1
            left = [g for g in games if g.game_id not in acked]
            resp = await stub.UploadGames(iter([upload_request(left), upload_request(left)]))
            taken = [a.game_id for a in resp.acks if a.status == ACCEPTED]
            moves = sum(len(g.moves) for g in left[: len(taken)])
            assert taken == [g.game_id for g in left[: len(taken)]]
            assert moves <= 400 or len(taken) == 1
            if len(taken) < len(left):
                assert moves + len(left[len(taken)].moves) > 400
                assert len(resp.acks) == len(taken)  # the second message was never read
            acked.extend(taken)
    assert rounds >= 2 and sorted(acked) == sorted(g.game_id for g in games)


@pytest.mark.slow
async def test_validation_is_fair_one_caller_cannot_starve_another(coordinator_factory) -> None:
    # Three attackers keep the only validation process busy with heavy messages (games that
    # replay to the end before failing the result check); two use a token of their own, one the
    # legitimate uploader's. Before, the pool ran jobs first come first served: a one-game upload
    # waited behind the whole backlog (147 s in the report).
    coord = await coordinator_factory(validate_workers=1)
    conn = db.connect(coord.data_dir)
    hostile, _ = auth.create_token(conn, "worker", "hostile")
    conn.close()
    heavy = make_random_game(9, seed=60)
    heavy.result.score += 1  # result_mismatch, found after the whole replay
    await coord.store_tasks_for([heavy])  # its copies name the same task
    copies = []
    for i in range(100):
        g = records_pb2.GameRecord()
        g.CopyFrom(heavy)
        g.game_id = f"heavy-{i:04d}"
        copies.append(g)
    attack = upload_request(copies)
    started = asyncio.Event()

    async def attacker(token: str) -> None:
        async with make_channel(coord.address, token=token) as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)

            async def forever() -> AsyncIterator[coordinator_pb2.UploadGamesRequest]:
                while True:
                    started.set()
                    yield attack

            while True:
                await stub.UploadGames(forever())

    attackers = [asyncio.ensure_future(attacker(t)) for t in (hostile, hostile, coord.worker_token)]
    try:
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.sleep(2.0)  # a backlog of heavy jobs builds up
        assert len(coord.app.validation.queue) >= 3
        legit = make_random_game(9, seed=61)
        await coord.store_tasks_for([legit])
        async with coord.channel() as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            resp = await stub.UploadGames(iter([upload_request([legit])]), timeout=10)
        assert resp.accepted == 1
    finally:
        for t in attackers:
            t.cancel()
        await asyncio.gather(*attackers, return_exceptions=True)


def _with_komi(game: records_pb2.GameRecord, komi: float, i: int) -> records_pb2.GameRecord:
    """``game`` (scored, not resigned) played under another komi: same moves and ownership,
    score and winner moved by the komi's change."""
    g = records_pb2.GameRecord()
    g.CopyFrom(game)
    g.game_id = f"komi-{i:05d}-{game.game_id[:20]}"
    g.komi = komi
    g.result.score = game.result.score + game.komi - komi
    g.result.winner = (
        common_pb2.COLOR_BLACK
        if g.result.score > 0
        else common_pb2.COLOR_WHITE
        if g.result.score < 0
        else common_pb2.COLOR_UNSPECIFIED
    )
    return g


@pytest.mark.slow
async def test_many_komi_values_keep_shard_groups_bounded(coordinator_factory, monkeypatch) -> None:
    # 3,000 games of 3,000 komi values forced 3,000 one-game shard cuts, each rewriting the
    # whole ingest journal on the storage thread: a legitimate upload missed its deadline.
    coord = await coordinator_factory(
        positions_per_shard=100_000, max_shard_groups=4, flush_interval_s=3600
    )
    store = coord.app.store
    rewrites = 0
    real_rewrite = store.journal.rewrite

    def counted(keep: set[int]) -> None:
        nonlocal rewrites
        rewrites += 1
        real_rewrite(keep)

    monkeypatch.setattr(store.journal, "rewrite", counted)
    base = make_random_game(5, seed=3)
    assert not base.result.resigned
    # Komi a task might hand out (a range): 40 values, five groups once rounded to half points.
    nearby = [_with_komi(base, 6.0 + 0.05 * i, i) for i in range(40)]
    # A hostile spread: 100 values, each its own group.
    spread = [_with_komi(base, -24.75 + 0.5 * i, 100 + i) for i in range(100)]
    legit = make_random_game(5, seed=4)
    # A task for each komi: the store's bound holds whatever the tasks allowed.
    await coord.store_tasks_for([*nearby, *spread, legit])
    async with coord.channel() as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        resp = await stub.UploadGames(
            iter([upload_request(nearby[i : i + 10]) for i in range(0, 40, 10)])
        )
        assert resp.accepted == 40
        await coord.app.ingest.cut()
        # five groups; one over the limit of four: the oldest is cut early
        assert sorted(k[1] for k in store.pending) == [6.5, 7.0, 7.5, 8.0]
        assert [(s.komi, s.games) for s in store.list_shards()] == [(6.0, 5)]

        async def attack() -> None:
            for i in range(0, 100, 10):
                r = await stub.UploadGames(iter([upload_request(spread[i : i + 10])]))
                assert r.accepted == 10

        attacker = asyncio.ensure_future(attack())
        await asyncio.sleep(0.5)
        resp = await stub.UploadGames(iter([upload_request([legit])]), timeout=10)
        assert resp.accepted == 1
        await attacker
    # Cuts run one per storage-thread task after each message, between other callers' work:
    # groups beyond the limit are cut as fast as the disk allows, never more than one per game.
    await coord.app.ingest.cut()
    assert len(store.pending) <= 4
    cuts = len(store.list_shards())
    assert cuts >= 100 - 4 and rewrites <= cuts // 2, (cuts, rewrites)
    await coord.app.db(store.flush_all)
    shards = store.list_shards()
    stored = [
        gid
        for s in shards
        for gid in _shard_ids(coord.data_dir / "training_data" / "run_001" / s.file_name)
    ]
    assert sorted(stored) == sorted(g.game_id for g in [*nearby, *spread, legit])
    assert {s.komi for s in shards} >= {6.0, 6.5, 7.0, 7.5, 8.0}
    assert all(s.komi * 2 == int(s.komi * 2) for s in shards)
    first = next(s for s in shards if s.komi == 6.0)
    with np.load(coord.data_dir / "training_data" / "run_001" / first.file_name) as z:
        # each row's globals carry its game's own komi (mover's view / 20), not the group's
        komi_black = -z["globals"][z["move_number"] == 0][:, 0] * 20
    np.testing.assert_allclose(sorted(komi_black), [6.0, 6.05, 6.1, 6.15, 6.2], atol=1e-5)


def _shard_ids(path: Path) -> list[str]:
    with np.load(path) as z:
        return [str(g) for g in z["game_ids"]]


class FullDisk:
    """A data dir on a disk that can be filled and freed: a small tmpfs where this process
    may mount one (root), else the ingest journal's writes patched to fail with ENOSPC."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        root.mkdir()
        self.mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(root)], capture_output=True
            ).returncode
            == 0
        )
        self.filler = root / "filler"

    def fill(self) -> None:
        if not self.mounted:
            from kgrpc.coordinator import journal

            def no_space(fd: int, data: bytes) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

            self.monkeypatch.setattr(journal.os, "write", no_space)
            return
        block = b"\0" * 4096  # tmpfs allocates pages: fill every one
        with open(self.filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC

    def free(self) -> None:
        if not self.mounted:
            self.monkeypatch.undo()
            return
        self.filler.unlink()

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.root)], capture_output=True)


async def test_full_disk_is_resource_exhausted_with_one_log_line(
    tmp_path, monkeypatch, caplog
) -> None:
    disk = FullDisk(tmp_path / "disk", monkeypatch)
    coord = await start_coordinator(disk.root, positions_per_shard=100_000)
    try:
        games = make_random_games(8, 9, seed=70)
        await coord.store_tasks_for(games)
        async with coord.channel() as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            assert (await stub.UploadGames(iter([upload_request(games[:2])]))).accepted == 2
            disk.fill()
            with caplog.at_level(logging.INFO):
                for i in range(2, 6):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.UploadGames(iter([upload_request(games[i : i + 1])]))
                    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    assert "disk is full" in err.value.details()
                disk.free()
                resp = await stub.UploadGames(iter([upload_request(games[2:])]))
            assert resp.accepted == 6
            stats = await stub.GetStats(coordinator_pb2.GetStatsRequest())
        assert stats.games_accepted == 8
    finally:
        await coord.stop()
        disk.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().split(" (")[0] for r in errors] == ["storage full"], errors
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert [r for r in caplog.records if r.getMessage().startswith("storage works again")]


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl CLI for a self-signed certificate"
)
@pytest.mark.slow
def test_a_tls_key_of_another_certificate_is_one_clear_line(tmp_path) -> None:
    paths = {}
    for name in ("a", "b"):
        made = subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=localhost",
                "-keyout",
                str(tmp_path / f"{name}.key"),
                "-out",
                str(tmp_path / f"{name}.pem"),
            ],
            capture_output=True,
        )
        assert made.returncode == 0, made.stderr
        paths[name] = (tmp_path / f"{name}.pem", tmp_path / f"{name}.key")
    out = cli(
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "d"),
        "--tls-cert",
        str(paths["a"][0]),
        "--tls-key",
        str(paths["b"][1]),
    )
    assert out.returncode == 2
    # Besides the start-up line naming the Go engine in use (INFO), one line, no traceback.
    lines = [x for x in out.stderr.strip().splitlines() if " INFO " not in x]
    assert lines == [
        f"kgrpc-coordinator: TLS: the key {paths['b'][1]} does not belong to the certificate "
        f"{paths['a'][0]}"
    ]
