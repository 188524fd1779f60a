"""Bounded resources under attack, against a real coordinator (issue 11 items 1-5, 16).

Memory is read from the daemon's RSS: the coordinator runs as a subprocess (``psutil`` on its
pid) with small limits, so the tests stay fast and an attack that leaks shows at once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import psutil
import pytest
import pytest_asyncio
import zstandard

from kgrpc.coordinator.testing import upload_request
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_game
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MB = 1 << 20


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
    return subprocess.run([PY, "-m", "kgrpc.coordinator", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


async def start_daemon(data_dir: Path, *flags: str) -> Daemon:
    token = cli("token", "create", "--data-dir", str(data_dir), "--role", "worker").stdout.strip()
    port_file = data_dir / "coordinator.port"
    proc = subprocess.Popen(
        [PY, "-m", "kgrpc.coordinator", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
         "--log-level", "WARNING", *flags],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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


async def test_a_never_ending_upload_stream_is_cut_and_duplicates_are_not_received(
        daemons) -> None:
    # One stream re-sending a stored game forever: before, every ack was kept until the stream
    # ended (2.5 GB for 13 MB sent), the reply outgrew the message limit, and each re-send
    # counted as a game received.
    d = await daemons("--max-games-per-message", "10", "--max-games-per-stream", "50",
                      "--validate-workers", "-1")
    game = make_random_game(9, seed=31)
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
