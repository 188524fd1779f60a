"""The parts of kgrpc-cluster that need no daemons: the live view, the summary and its JSON,
the stop order and the check for a dead child (real subprocesses)."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import pytest

from kgrpc.programs.cluster.display import Display, Snapshot, last_line
from kgrpc.programs.cluster.options import ClusterConfig, parse_args
from kgrpc.programs.cluster.run import ENGINE_THREADS, latest_release, local_inference_args
from kgrpc.programs.cluster.summary import SUMMARY_FILE, summary_text, write_summary_json
from kgrpc.programs.cluster.supervise import ClusterError, Supervisor
from kgrpc.programs.cluster.text import elo_interval, mm_ss, model_status
from kgrpc.v1 import common_pb2, coordinator_pb2

RELEASED = common_pb2.MODEL_STATUS_RELEASED
CANDIDATE = common_pb2.MODEL_STATUS_CANDIDATE


def make_stats() -> coordinator_pb2.Stats:
    s = coordinator_pb2.Stats(
        games_accepted=40,
        games_rejected=1,
        games_duplicate=2,
        positions_accepted=2400,
        shards_written=3,
    )
    s.models.add(
        name="kg-b1c8-s0-d0",
        status=RELEASED,
        created_unix_ms=1,
        released_unix_ms=1,
        elo_measured=True,
    )
    s.models.add(
        name="kg-b1c8-s30-d400",
        status=RELEASED,
        elo=35.5,
        elo_measured=True,
        training_steps=30,
        training_rows=400,
        created_unix_ms=2,
        released_unix_ms=5,
    )
    s.models.add(
        name="kg-b1c8-s60-d800",
        status=CANDIDATE,
        training_steps=60,
        training_rows=800,
        created_unix_ms=3,
    )
    s.matches.add(
        candidate_model="kg-b1c8-s30-d400",
        reference_model="kg-b1c8-s0-d0",
        wins=4,
        elo_diff=math.inf,
        elo_low=120.0,
        elo_high=math.inf,
        decision="released",
    )
    w = s.workers.add(username="demo-1-with-a-long-name", games_accepted=40)
    w.stats.moves_per_s = 12.5
    w.stats.current_model = "kg-b1c8-s30-d400"
    return s


def test_local_workers_run_the_net_on_one_thread() -> None:
    """With --worker-inference local each worker's engine gets one ONNX Runtime thread, as
    the inference server does, not the worker's default of one per core (which beside the
    trainer oversubscribed a 2-core machine); the real worker's parser takes the flags."""
    from kgrpc.worker.cli import build_parser, config_from_args

    assert ENGINE_THREADS == 1
    args = local_inference_args(32)
    cfg = config_from_args(build_parser().parse_args(["--coordinator", "127.0.0.1:1", *args]))
    assert (cfg.inference, cfg.max_batch, cfg.intra_threads) == ("local", 32, 1)
    assert config_from_args(build_parser().parse_args(["--coordinator", "x:1"])).intra_threads == 0


def test_text_forms() -> None:
    assert model_status(RELEASED) == "released"
    assert elo_interval(math.inf, 120.0, math.inf) == "inf [120, inf]"
    assert elo_interval(-math.inf, -math.inf, -3.4) == "-inf [-inf, -3]"
    assert mm_ss(125.9) == "02:05"


def test_summary_text_and_json(tmp_path: Path) -> None:
    stats = make_stats()
    evaluation = {
        "model": "kg-b1c8-s30-d400",
        "vs_random": {"games": 2, "wins": 2, "losses": 0, "draws": 0},
        "vs_first": {"games": 2, "wins": 1, "losses": 1, "draws": 0, "opponent": "kg-b1c8-s0-d0"},
    }
    text = summary_text(stats, evaluation, tmp_path, tmp_path / "logs", 65)
    lines = text.splitlines()
    assert "kgrpc-cluster summary" in lines
    assert "elapsed 01:05; games accepted 40 (rejected 1), positions 2400, shards 3" in text
    row = next(ln for ln in lines if ln.startswith("kg-b1c8-s30-d400 "))
    assert row.split() == ["kg-b1c8-s30-d400", "released", "35.5", "30", "400"]
    # The first model is the anchor (0 by definition); the candidate has no match yet.
    assert next(ln for ln in lines if ln.startswith("kg-b1c8-s0-d0 ")).split()[2] == "0.0"
    assert next(ln for ln in lines if ln.startswith("kg-b1c8-s60-d800 ")).split()[2] == "-"
    assert "no Elo against the first model, for 1 of these" in text
    match = next(ln for ln in lines if ln.startswith("kg-b1c8-s30-d400") and "inf" in ln)
    assert "4-0-0" in match and "inf [120, inf]" in match and match.endswith("released")
    assert "  vs random play" in text and "won 2/2 (lost 0, drawn 0)" in text
    assert "  vs kg-b1c8-s0-d0" in text and "won 1/2 (lost 1, drawn 0)" in text
    assert f"summary   {tmp_path / SUMMARY_FILE}" in lines

    cfg = ClusterConfig(data_dir=str(tmp_path))
    write_summary_json(tmp_path, cfg, stats, evaluation)
    data = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert data["config"]["data_dir"] == str(tmp_path)
    assert data["stats"]["models"][1]["status"] == "MODEL_STATUS_RELEASED"
    assert data["evaluation"] == evaluation
    write_summary_json(tmp_path, cfg, None, {})
    assert json.loads((tmp_path / SUMMARY_FILE).read_text())["stats"] == {}


def test_summary_does_not_rate_releases_made_without_gating(tmp_path: Path) -> None:
    # Gating off: every release carries Elo 0, which measures nothing; the coordinator says
    # which Elo is known (ModelInfo.elo_measured: the anchor here), and only that one shows.
    # An Elo of 0 that a match measured shows too (the coordinator's side of elo_measured:
    # tests/test_coordinator_gating.py).
    s = coordinator_pb2.Stats(models_total=3)
    for i in range(3):
        s.models.add(
            name=f"kg-b1c8-s{i}-d{i}", status=RELEASED, created_unix_ms=i + 1, elo_measured=i == 0
        )
    text = summary_text(s, {}, tmp_path, tmp_path / "logs", 5)
    elos = [ln.split()[2] for ln in text.splitlines() if ln.startswith("kg-b1c8-s")]
    assert elos == ["0.0", "-", "-"]
    assert "for 2 of these" in text
    s.models[2].elo_measured = True
    text = summary_text(s, {}, tmp_path, tmp_path / "logs", 5)
    assert [ln.split()[2] for ln in text.splitlines() if ln.startswith("kg-b1c8-s")] == [
        "0.0",
        "-",
        "0.0",
    ]
    assert "for 1 of these" in text


def test_latest_release_is_the_newest_released_model() -> None:
    newest = latest_release(make_stats())
    assert newest is not None and newest.name == "kg-b1c8-s30-d400"
    assert latest_release(coordinator_pb2.Stats()) is None


def test_live_view_and_plain_lines(tmp_path: Path, capsys) -> None:
    snapshot = Snapshot()
    display = Display(7, tmp_path, live=False, started=time.monotonic())
    assert display.render(snapshot, "127.0.0.1:1", None).endswith("(waiting for the coordinator)")
    stats = make_stats()
    snapshot.record(stats)
    snapshot.history.insert(0, (snapshot.at - 10, 0, 0))
    games_per_s, positions_per_s = snapshot.rates()
    assert games_per_s == pytest.approx(4.0) and positions_per_s == pytest.approx(240.0)

    log = tmp_path / "trainer.log"
    log.write_bytes(b"start\nstep 10 loss 3.1\rstep 20 loss 2.9\r\n\n")
    assert last_line(log) == "step 20 loss 2.9"
    assert last_line(tmp_path / "missing.log") == "(no log yet)"
    table = display.render(snapshot, "127.0.0.1:1", log)
    assert table.startswith("kgrpc-cluster  7x7  00:00  coordinator 127.0.0.1:1")
    assert "4.00 games/s" in table and "240.0 positions/s" in table
    assert "demo-1-with" in table and "demo-1-with-" not in table  # names cut to 11 characters
    assert table.splitlines()[-1] == "trainer: step 20 loss 2.9"

    display.show(snapshot, "127.0.0.1:1", log)
    display.show(snapshot, "127.0.0.1:1", log)  # within 15 s of the last line: nothing
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert "games 40 (4.00/s), positions 2400, shards 3, models 3 (2 released)" in out[0]
    assert out[0].endswith("pending matches 0")
    # A long run: GetStats answers the newest page of models, and the total.
    stats.models_total = 250
    snapshot.record(stats)
    assert "(the newest 3 of 250 models)" in display.render(snapshot, "127.0.0.1:1", log)
    display._last_plain = 0.0
    display.show(snapshot, "127.0.0.1:1", log)
    assert "models 250 (2 released among the newest 3)" in capsys.readouterr().out


def test_options_are_checked(capsys) -> None:
    assert parse_args(["--keep", "--workers", "3"]).fresh is False
    with pytest.raises(SystemExit):
        parse_args(["--gating-games", "3"])
    assert "--gating-games must be even" in capsys.readouterr().err


async def test_supervisor_notices_a_dead_child_and_stops_in_order(tmp_path: Path) -> None:
    procs = Supervisor(tmp_path, tmp_path, python=sys.executable)
    assert (await procs.run_once("hello", ["-c", "print('hi')"])).strip() == "hi"
    with pytest.raises(ClusterError, match=r"boom failed \(exit 3\)"):
        await procs.run_once("boom", ["-c", "import sys; sys.exit(3)"])
    # The trainer may end by itself; a worker may not.
    await procs.spawn("trainer", ["-c", "pass"], expected_exit=True)
    sleeper = "import time; print('up', flush=True); time.sleep(60)"
    await procs.spawn("coordinator", ["-c", sleeper])
    await procs.spawn("worker-1", ["-c", sleeper])
    await procs.child("trainer").proc.wait()
    procs.check()
    crash = await procs.spawn("worker-2", ["-c", "print('bad input'); raise SystemExit(5)"])
    await crash.proc.wait()
    with pytest.raises(ClusterError, match="worker-2 exited with code 5") as info:
        procs.check()
    assert "bad input" in str(info.value)

    ended: list[str] = []

    async def note_end(name: str) -> None:
        await procs.child(name).proc.wait()
        ended.append(name)

    watchers = [asyncio.create_task(note_end(n)) for n in ("coordinator", "worker-1")]
    await procs.stop_all(grace_s=10)
    await asyncio.gather(*watchers)
    assert ended == ["worker-1", "coordinator"]
    assert not procs.any_running()
