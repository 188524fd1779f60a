"""What a worker says when its coordinator is away: at a first start it has no task, so
nothing to play (issue 28: it used to say "games keep being spooled"); once it has a self-play
task, it keeps playing that task and spooling the games."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from kgrpc.v1 import coordinator_pb2
from kgrpc.worker.daemon import Worker
from tests.worker_helpers import free_port, worker_config


async def test_a_first_start_without_its_coordinator_says_nothing_is_played(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(worker_config(f"127.0.0.1:{free_port()}", "t", tmp_path / "w"))
    worker.stop.final_wait_s = 0.5
    with caplog.at_level(logging.WARNING, logger="kgrpc.worker"):
        run = asyncio.ensure_future(worker.run(install_signals=False))
        for _ in range(200):
            if worker.coord_outage.down:
                break
            await asyncio.sleep(0.05)
        assert worker.coord_outage.down
        worker.request_stop()
        await asyncio.wait_for(run, 30)
    lines = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].endswith("nothing to play until it answers (no self-play task yet)")
    assert "spooled" not in lines[0]


def test_with_a_self_play_task_the_games_keep_being_spooled(tmp_path: Path) -> None:
    worker = Worker(worker_config("127.0.0.1:1", "t", tmp_path / "w"))
    assert not worker.source.can_play_offline
    worker.source._task = coordinator_pb2.Task(
        task_id="s", selfplay=coordinator_pb2.SelfPlayTask(model="m", games=4)
    )
    assert worker.source.can_play_offline
    assert worker._meanwhile_offline() == "games keep being spooled"
    worker.source._task = coordinator_pb2.Task(
        task_id="m", match=coordinator_pb2.MatchTask(candidate_model="a", reference_model="b")
    )
    assert not worker.source.can_play_offline
