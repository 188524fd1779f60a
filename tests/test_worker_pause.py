"""Pause and resume without losing a game (issue 28; KataGo's contribute has them): while
paused a worker starts no game and its searches wait at their next evaluation; resumed, the
same games go on and every one reaches the coordinator. ``kgrpc-worker pause|resume`` signals
the worker of a work dir (SIGUSR1 / SIGUSR2), and the status line says PAUSED."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kgrpc.coordinator.testing import start_coordinator
from kgrpc.worker import cli
from kgrpc.worker.daemon import Worker
from kgrpc.worker.lifecycle import PID_FILE, Pause, Stop
from kgrpc.worker.status import status_line
from tests.worker_helpers import COORD, M1, stats, worker_config, write_models


async def test_pause_waits_until_resume_or_stop() -> None:
    stop = Stop()
    pause = Pause(stop)
    await asyncio.wait_for(pause.wait(), 1)  # not paused: at once
    pause.pause()
    waiting = asyncio.ensure_future(pause.wait())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    pause.resume()
    await asyncio.wait_for(waiting, 1)
    pause.pause()
    waiting = asyncio.ensure_future(pause.wait())
    await asyncio.sleep(0.05)
    stop.request()  # a stop ends the wait: the games in progress then finish
    await asyncio.wait_for(waiting, 1)


def test_the_command_says_when_no_worker_runs(tmp_path: Path, capsys) -> None:
    assert cli.main(["pause", "--work-dir", str(tmp_path)]) == 1
    assert "no worker is running in" in capsys.readouterr().err
    (tmp_path / PID_FILE).write_text("999999999\n")
    assert cli.main(["resume", "--work-dir", str(tmp_path)]) == 1
    assert "is not running any more" in capsys.readouterr().err


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("onnxruntime")
    return write_models(tmp_path_factory.mktemp("models"), (M1,))[M1]


async def _until(check, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


@pytest.mark.slow
async def test_pause_and_resume_a_running_worker_loses_no_game(tmp_path: Path, model: Path) -> None:
    from trainer.publish import publish_model

    coord = await start_coordinator(tmp_path, **COORD)
    try:
        await publish_model(coord.address, coord.trainer_token, model)
        work = tmp_path / "w"
        worker = Worker(worker_config(coord.address, coord.worker_token, work, intra_threads=1))
        run = asyncio.ensure_future(worker.run(install_signals=True))
        search = worker.counters.search
        await _until(lambda: worker.counters.games_finished >= 1 and search.nn_evals > 0)
        assert (work / PID_FILE).is_file()
        # The in-process engine runs with the thread cap it was given.
        local = worker.models.evaluators.local  # type: ignore[union-attr]
        engines = [m.engine for m in local.registry.models.values()]
        assert engines and all(e._options.intra_op_num_threads == 1 for e in engines)

        assert cli.main(["pause", "--work-dir", str(work)]) == 0  # SIGUSR1 to this process
        await _until(lambda: worker.counters.paused)
        assert status_line(worker.counters, worker.meter).startswith("PAUSED")
        await asyncio.sleep(0.5)  # an evaluation already sent may still come back
        evals, started = search.nn_evals, worker.counters.games_started
        await asyncio.sleep(1.0)
        assert (search.nn_evals, worker.counters.games_started) == (evals, started)
        playing = worker.counters.games_started - worker.counters.games_finished

        assert cli.main(["resume", "--work-dir", str(work)]) == 0  # SIGUSR2
        await _until(lambda: not worker.counters.paused and search.nn_evals > evals)
        await _until(lambda: worker.counters.games_finished >= started + 1)
        assert "PAUSED" not in status_line(worker.counters, worker.meter)

        worker.request_stop()
        assert await asyncio.wait_for(run, 120) == 0
        assert not (work / PID_FILE).exists()
        # None lost: the games that waited while paused finished and were accepted.
        assert worker.counters.games_failed == 0 and playing >= 1
        s = await stats(coord.address, coord.worker_token)
        assert s.games_accepted == worker.counters.games_finished == worker.counters.games_uploaded
    finally:
        await coord.stop()
