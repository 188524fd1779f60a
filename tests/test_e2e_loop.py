"""The whole loop on one machine, shortened: kgrpc-cluster with a tiny net on 7x7.

Real processes on loopback: coordinator, inference server, a worker, the trainer. One
generation: self-play -> shards -> training -> export -> publish -> gating match -> release,
and the worker switching to the released model.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kgrpc.net.certs import have_openssl
from kgrpc.programs.cluster.datadir import MARKER, prepare_data_dir

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_short_loop_trains_gates_releases_and_workers_switch(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    # The data dir holds an earlier run of kgrpc-cluster's own: it is emptied and reused
    # (a directory that is not one of its runs is refused: tests/test_cluster_datadir.py).
    prepare_data_dir(data, fresh=True)
    (data / "logs").mkdir()
    (data / "logs" / "stale.log").write_text("from an earlier run\n")
    cmd = [
        sys.executable,
        "-m",
        "kgrpc.programs.cluster",
        "--data-dir",
        str(data),
        "--board-size",
        "7",
        "--workers",
        "1",
        "--generations",
        "1",
        "--blocks",
        "1",
        "--channels",
        "16",
        "--visits",
        "8",
        "--parallel-games",
        "8",
        "--gating-games",
        "4",
        # The lowest bar gating allows: released if it won more games than it lost (a release
        # never goes to a model that did not beat the one it replaces). The test checks the
        # mechanics, not strength: either decision is possible, and each is checked.
        "--gating-elo-threshold",
        "-100000",
        "--steps-per-generation",
        "30",
        "--min-new-rows",
        "200",
        "--batch-size",
        "64",
        "--eval-games",
        "2",
        "--max-minutes",
        "8",
        "--view",
        "plain",
        # The ladder follows the run: each release against random play (and GNU Go level 1
        # when installed) and, from the second on, the first model.
        "--ladder-games",
        "2",
    ]
    # The whole loop over TLS (a private CA made in the data dir) when openssl is there: every
    # daemon's server and client side in one run.
    tls = have_openssl()
    if tls:
        cmd.append("--tls")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=590)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((data / "cluster-summary.json").read_text())
    stats = summary["stats"]
    assert int(stats["games_accepted"]) > 0
    assert int(stats.get("games_rejected", 0)) == 0
    assert int(stats["positions_accepted"]) >= 200

    models = {m["name"]: m for m in stats["models"]}
    trained = [m for m in models.values() if int(m.get("training_steps", 0)) >= 30]
    assert len(trained) == 1, models
    new = trained[0]
    (first,) = [m for m in models.values() if int(m.get("training_steps", 0)) == 0]
    assert (data / "models" / f"{new['name']}.onnx").is_file()

    matches = stats["matches"]
    assert [m["candidate_model"] for m in matches] == [new["name"]]
    m = matches[0]
    assert m["reference_model"] == first["name"]
    wins, losses = int(m.get("wins", 0)), int(m.get("losses", 0))
    assert wins + losses + int(m.get("draws", 0)) >= 4
    released = wins > losses
    assert m["decision"] == ("released" if released else "rejected"), m
    assert new["status"] == ("MODEL_STATUS_RELEASED" if released else "MODEL_STATUS_REJECTED")
    # The worker plays with the best model: the new one only if it was released.
    current = new["name"] if released else first["name"]
    assert [w["stats"]["current_model"] for w in stats["workers"]] == [current]

    shards = sorted((data / "training_data" / "run_001").glob("games_*.npz"))
    assert shards
    with np.load(shards[0]) as shard:
        assert shard["states"].dtype == np.uint8 and int(shard["board_size"]) == 7
    assert "kgrpc-cluster summary" in proc.stdout
    assert summary["evaluation"]["vs_random"]["games"] == 2
    assert (data / MARKER).is_file() and not (data / "logs" / "stale.log").exists()
    # The dashboard was on, and every gating game and self-play game was kept as SGF (the
    # summary's figures may be a moment older than the last games).
    assert "dashboard on http://127.0.0.1:" in proc.stdout
    gating = sorted((data / "sgf" / new["name"] / "gating").glob("*.sgf"))
    assert len(gating) >= int(m.get("wins", 0)) + int(m.get("losses", 0)) + int(m.get("draws", 0))
    assert len(list((data / "sgf").glob("*/selfplay/*.sgf"))) >= int(stats["games_accepted"])

    # The ladder rated every release, the coordinator kept the results, the summary shows them.
    ratings = {(r["model"], r["opponent"]): r for r in stats["ratings"]}
    assert {m for m, _ in ratings} == {
        m["name"] for m in models.values() if m["status"] == "MODEL_STATUS_RELEASED"
    }
    # The newest release: the trained model when it won its gating match, else the first.
    newest = new if released else first
    assert (newest["name"], "random") in ratings
    assert released == ((newest["name"], "first") in ratings)  # the first is not rated vs itself
    assert int(ratings[newest["name"], "random"]["games"]) == 2
    assert "ladder: Elo against fixed references" in proc.stdout
    assert f"plot      {data / 'ladder' / 'ladder.png'}" in proc.stdout
    assert (data / "ladder" / "ladder.png").is_file()
    if tls:
        assert (data / "tls" / "ca.pem").is_file()
        assert "(TLS" in (data / "logs" / "coordinator.log").read_text()
    for log in (data / "logs").glob("*.log"):  # tokens went in the environment
        assert "visible to every user" not in log.read_text(), log


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    import signal
    import time

    psutil = pytest.importorskip("psutil")
    data = tmp_path / "cluster"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kgrpc.programs.cluster",
            "--data-dir",
            str(data),
            "--board-size",
            "7",
            "--workers",
            "1",
            "--generations",
            "5",
            "--blocks",
            "1",
            "--channels",
            "8",
            "--visits",
            "8",
            "--parallel-games",
            "4",
            "--view",
            "plain",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until every daemon runs
        lines.append(line)
        if "trainer started" in line:
            break
    children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(children) >= 4, lines  # coordinator, inference, worker, trainer
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(lines) + rest
    assert "interrupted: stopping every process" in rest

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.time() + 10
    while time.time() < deadline and any(running(p) for p in children):
        time.sleep(0.2)
    alive = [p for p in children if running(p)]
    assert not alive, f"processes left running: {alive}"


def thread_priorities(pid: int) -> list[tuple[int, int]]:
    """The nice value and scheduling policy of every thread of a process (Linux keeps them
    per thread)."""
    out = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread ended
            # fields 19 and 41 of stat, the 17th and 39th after the command's parenthesis
            fields = stat.read_text().rsplit(")", 1)[1].split()
            out.append((int(fields[16]), int(fields[38])))
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")
def test_a_spare_worker_and_its_threads_run_at_sched_idle(tmp_path: Path) -> None:
    """--spare-workers 1 starts a second worker with --nice 19 --idle; the worker lowers its
    priority before any thread starts, so its engine and gRPC threads all run at nice 19 and
    SCHED_IDLE, and the first worker's at the run's own priority and policy."""
    import signal
    import time

    psutil = pytest.importorskip("psutil")
    from kgrpc.programs.cluster.run import SPARE_WORKER_NICE

    base = os.getpriority(os.PRIO_PROCESS, 0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kgrpc.programs.cluster", "--data-dir", str(tmp_path / "c")]
        + ["--board-size", "7", "--workers", "1", "--spare-workers", "1"]
        + ["--worker-inference", "local", "--generations", "5", "--blocks", "1"]
        + ["--channels", "8", "--visits", "8", "--parallel-games", "4", "--view", "plain"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if "trainer started" in line:
            break
    try:
        assert f"1 workers and 1 spare at SCHED_IDLE, nice {SPARE_WORKER_NICE} started" in "".join(
            lines
        )
        workers = {}
        deadline = time.time() + 60
        while time.time() < deadline:  # until both play: their engines' threads exist
            for child in psutil.Process(proc.pid).children(recursive=True):
                cmd = child.cmdline()
                if "kgrpc.worker" in cmd:
                    workers[cmd[cmd.index("--username") + 1]] = child.pid
            if len(workers) == 2 and all(len(thread_priorities(p)) > 1 for p in workers.values()):
                break
            time.sleep(0.5)
        assert sorted(workers) == ["demo-1", "demo-2"], lines
        time.sleep(3)  # the engines load the first model and start their threads
        first = thread_priorities(workers["demo-1"])
        spare = thread_priorities(workers["demo-2"])
        idle_spare = (min(19, base + SPARE_WORKER_NICE), os.SCHED_IDLE)
        assert len(spare) > 1 and set(spare) == {idle_spare}, spare
        assert set(first) == {(base, os.sched_getscheduler(0))}, first
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
