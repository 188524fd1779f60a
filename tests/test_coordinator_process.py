"""The coordinator as a real process: SIGKILL mid-upload, restart, CLI, graceful stop."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter

import grpc
import numpy as np
import psutil
import pytest

from kgrpc.coordinator.store import Store
from kgrpc.coordinator.testing import store_tasks, terms_for_games, upload_request
from kgrpc.net import make_channel
from kgrpc.randgame import make_random_games
from kgrpc.v1 import coordinator_pb2, coordinator_pb2_grpc
from tests.process_helpers import cli, start_process


@pytest.mark.slow
async def test_sigkill_during_uploads_loses_no_acknowledged_game(tmp_path) -> None:
    data_dir = tmp_path / "data"
    created = cli("token", "create", "--data-dir", str(data_dir), "--role", "worker")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    games = make_random_games(80, 9, seed=4242)
    store_tasks(data_dir, terms_for_games(games))
    proc, address = await start_process(data_dir)
    acked: list[str] = []
    enough = asyncio.Event()

    async def uploader(part: list) -> None:
        async with make_channel(address, token=token) as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            for i in range(0, len(part), 2):
                try:
                    resp = await stub.UploadGames(
                        iter([upload_request(part[i : i + 2])]), timeout=20
                    )
                except grpc.aio.AioRpcError:
                    return  # the coordinator died: unacknowledged games stay with the worker
                except asyncio.CancelledError:
                    # grpc.aio may end a call cut by the server's death with CancelledError
                    # although nobody cancelled this task (as bench/fleet_sim.py notes): the
                    # same outcome as above; a real cancellation is raised again.
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise
                    return
                acked.extend(
                    a.game_id for a in resp.acks if a.status == coordinator_pb2.GAME_STATUS_ACCEPTED
                )
                if len(acked) >= 16:
                    enough.set()

    tasks = [asyncio.ensure_future(uploader(games[k::4])) for k in range(4)]
    await asyncio.wait_for(enough.wait(), 60)
    children = psutil.Process(proc.pid).children(recursive=True)  # the replay pool
    assert children
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    await asyncio.gather(*tasks)
    assert 16 <= len(acked) < 80
    # Orphaned pool processes notice and exit (they would otherwise wait for ever).
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [p.cmdline() for p in alive]

    # restart: stats over the wire, then a graceful stop
    proc, address = await start_process(data_dir)
    stats = cli("stats", "--coordinator", address, "--token", token, "--json")
    assert stats.returncode == 0, stats.stderr
    figures = json.loads(stats.stdout)
    assert int(figures["games_accepted"]) >= len(acked)
    table = cli("stats", "--coordinator", address, "--token", token)
    games_line = next(x for x in table.stdout.splitlines() if x.startswith("games "))
    assert games_line.split()[1:3] == [f"{int(figures['games_accepted']):,}", "accepted"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0

    # every acknowledged game is stored exactly once, in complete shards
    store = Store(data_dir, "run_001", positions_per_shard=400)
    assert store.recovery.missing_games == []
    store.flush_all()
    store.close()
    ids: list[str] = []
    for p in sorted((data_dir / "training_data" / "run_001").glob("games_*.npz")):
        with np.load(p) as z:
            ids.extend(str(g) for g in z["game_ids"])
    counts = Counter(ids)
    assert all(n == 1 for n in counts.values())
    assert set(acked) <= set(counts)
    assert not list((data_dir / "training_data" / "run_001").glob(".*tmp*"))


@pytest.mark.slow
def test_token_cli_list_and_revoke(tmp_path) -> None:
    created = cli(
        "token", "create", "--data-dir", str(tmp_path), "--role", "trainer", "--label", "gpu box"
    )
    token = created.stdout.strip()
    assert token.startswith("kgt_")
    assert token not in (tmp_path / "coordinator.sqlite3").read_bytes().decode(
        errors="replace"
    )  # only the hash
    listed = cli("token", "list", "--data-dir", str(tmp_path))
    assert "trainer" in listed.stdout and "gpu box" in listed.stdout and "active" in listed.stdout
    assert cli("token", "revoke", "--data-dir", str(tmp_path), "--token", token).returncode == 0
    assert "revoked" in cli("token", "list", "--data-dir", str(tmp_path)).stdout
    again = cli("token", "revoke", "--data-dir", str(tmp_path), "--id", "1")
    assert again.returncode == 1
    bad = cli("token", "create", "--data-dir", str(tmp_path), "--role", "admin")
    assert bad.returncode != 0 and "invalid choice" in bad.stderr
