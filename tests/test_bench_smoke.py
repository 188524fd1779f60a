"""Every ``kgrpc-bench`` benchmark runs end to end (tiny sizes) and reports its JSON keys.

Figures are not judged here (no timed assertions): only that each benchmark runs, measures
something and writes the keys its issue names, so `make bench` cannot rot unnoticed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
# Each runs a whole benchmark program in a subprocess: `make test` only.
pytestmark = pytest.mark.slow


def bench(tmp_path: Path, name: str, *args: str) -> dict:
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-m", "kgrpc.programs.bench.cli", name, *args, "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.export import init_model

    path = tmp_path_factory.mktemp("bench") / "tiny.onnx"
    init_model(7, 1, 8, path)
    return path


def positive(figures: dict, *keys: str) -> None:
    for key in keys:
        assert isinstance(figures[key], int | float) and figures[key] > 0, (key, figures[key])


def test_rules(tmp_path: Path) -> None:
    r = bench(tmp_path, "rules", "--seconds", "0.2")
    positive(
        r, "playout_moves_per_s_9", "playout_moves_per_s_19", "replay_encode_positions_per_s_19"
    )


def test_mcts(tmp_path: Path) -> None:
    from kgrpc import native

    r = bench(
        tmp_path, "mcts", "--seconds", "0.3", "--games", "4", "--visits", "16", "--cache", "1000"
    )
    positive(r, "mcts_visits_per_s_9", "mcts_visits_per_s_19", "mcts_visits_per_s_9_python")
    if native.ENABLED:
        positive(r, "mcts_visits_per_s_9_native", "mcts_visits_per_s_19_native")
        assert 0.0 <= r["mcts_cache_hit_share_9"] <= 1.0


def test_ingest(tmp_path: Path) -> None:
    r = bench(
        tmp_path,
        "ingest",
        "--games",
        "16",
        "--board-size",
        "9",
        "--moves",
        "60",
        "--uploaders",
        "2",
        "--per-message",
        "4",
        "--backends",
        "sqlite",
    )
    positive(r, "games_per_s", "positions_per_s", "peak_rss_mb", "journal_payload_stored_kb")
    assert r["accepted"] == 16 and r["rejected"] == 0
    assert r["journal_payload_stored_kb"] < r["journal_payload_kb"]  # stored compressed


def test_ingest_on_shared_engines_side_by_side(tmp_path: Path) -> None:
    """Issue 26: SQLite+local, PostgreSQL+S3 with one replica and with two, in one run; the
    engines are started by the benchmark, and one not installed is a skipped row."""
    from kgrpc.programs.bench import engines

    r = bench(
        tmp_path,
        "ingest",
        "--games",
        "24",
        "--board-size",
        "9",
        "--moves",
        "60",
        "--uploaders",
        "2",
        "--per-message",
        "4",
        "--impl",
        "native,python",
    )
    installed = not (engines.missing("postgresql") or engines.missing("s3"))
    shared = ["pg-s3", "pg-s3-x2"]
    assert r["backends"] == ["sqlite", *shared] if installed else ["sqlite"]
    assert set(r["backends_skipped"]) == (set() if installed else set(shared))
    positive(r, "games_per_s_sqlite", "coordinator_cpu_ms_per_game_sqlite")
    assert r["accepted"] == 24 and r["rejected"] == 0
    if installed:
        for key in ("pg_s3", "pg_s3_x2"):
            positive(r, f"games_per_s_{key}", f"coordinator_cpu_ms_per_game_{key}")
            # The postmaster, its backends and weed were found and read; their CPU time over
            # 24 games can be under one clock tick, so it is only required to be a figure.
            assert r[f"engine_processes_{key}"] >= 3, r[f"engine_processes_{key}"]
            assert r[f"engines_cpu_ms_per_game_{key}"] >= 0
            positive(r, f"games_per_s_ratio_{key}", f"cpu_per_game_ratio_{key}")


def test_shard_read_from_the_store_against_local_disk(tmp_path: Path) -> None:
    """Issue 26: the trainer's read throughput, local files against store mode on a
    directory and on S3 (skipped, with a note, without SeaweedFS)."""
    from kgrpc.programs.bench import engines

    r = bench(
        tmp_path,
        "shard-read",
        "--shards",
        "2",
        "--rows",
        "256",
        "--board-size",
        "9",
        "--repeat",
        "1",
    )
    positive(r, "local_mb_per_s", "store_dir_mb_per_s", "window_mb")
    if engines.missing("s3"):
        assert r["store_s3_mb_per_s"] is None and r["notes"]["store-s3"]
    else:
        positive(r, "store_s3_mb_per_s", "s3_ratio_to_local")


FLEET_RPCS = ("Register", "Heartbeat", "GetTask", "WatchModels", "UploadGames")


def test_fleet_against_its_own_coordinator(tmp_path: Path) -> None:
    """Issue 26: a handful of simulated volunteers against a coordinator the benchmark starts
    (it publishes the first model itself); every RPC is made and answered."""
    r = bench(
        tmp_path,
        "fleet",
        "--workers",
        "6",
        "--seconds",
        "5",
        "--games-per-minute",
        "30",
        "--heartbeat-s",
        "1",
    )
    assert r["errors"] == 0, r
    assert isinstance(r["p99_ms"], int | float) and r["p99_ms"] > 0
    assert r["registered"] == 6 and r["games_accepted"] > 0
    for rpc in FLEET_RPCS:
        assert r["rpcs"][rpc]["calls"] > 0 and r["rpcs"][rpc]["errors"] == 0, (rpc, r["rpcs"])
    assert r["p99_ms"] == max(f["p99_ms"] for f in r["rpcs"].values())
    assert r["coordinator_measured"] and r["coordinator_peak_rss_mb"] > 0


async def test_fleet_against_running_replicas(tmp_path: Path, pg_index: str) -> None:
    """``--coordinator A,B`` and ``--token``: two running replicas on one PostgreSQL index
    (in this process, so their CPU is this process's); every game the fleet saw accepted is
    in the shared index once."""
    import asyncio

    from kgrpc.coordinator.testing import start_coordinator
    from tests.dashboard_helpers import FIRST, publish

    a, b = [
        await start_coordinator(tmp_path / f"r{i}", index=pg_index, store=str(tmp_path / "s"))
        for i in range(2)
    ]
    try:
        await publish(a, FIRST)
        out = tmp_path / "fleet.json"
        cmd = ["-m", "kgrpc.programs.bench.cli", "fleet", "--coordinator"]
        cmd += [f"{a.address},{b.address}", "--token", a.worker_token, "--workers", "8"]
        cmd += ["--seconds", "4", "--games-per-minute", "40", "--channels", "2"]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *cmd,
            "--json",
            str(out),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        text, _ = await asyncio.wait_for(proc.communicate(), 240)
        assert proc.returncode == 0, text.decode()[-2000:]
        r = json.loads(out.read_text())
        assert r["errors"] == 0 and r["replicas"] == 2 and r["backend"] == "external", r
        assert r["games_accepted"] > 0 and r["p99_ms"] > 0
        conn = a.connect()
        try:
            stored = conn.execute("SELECT COUNT(*) FROM games").fetchone()[0]
        finally:
            conn.close()
        assert stored == r["games_accepted"]
    finally:
        await a.stop()
        await b.stop()


def test_inference(tmp_path: Path, tiny_model: Path) -> None:
    r = bench(
        tmp_path,
        "inference",
        "--model",
        str(tiny_model),
        "--clients",
        "4",
        "--batch",
        "4",
        "--seconds",
        "0.5",
    )
    positive(
        r,
        "raw_evals_per_s",
        "local_evals_per_s",
        "grpc_evals_per_s",
        "grpc_batched_evals_per_s",
        "grpc_over_raw",
        "mean_batch_size",
    )
    assert set(r["raw_by_batch"]) >= {"1", "64"}


def test_selfplay(tmp_path: Path, tiny_model: Path) -> None:
    r = bench(
        tmp_path,
        "selfplay",
        "--model",
        str(tiny_model),
        "--board-size",
        "7",
        "--parallel-games",
        "4",
        "--visits",
        "8",
        "--seconds",
        "1.5",
        "--max-batch",
        "8",
    )
    positive(r, "visits_per_s", "nn_evals_per_s", "mean_batch_size", "evals_over_raw")
    # No --intra-threads: one ONNX Runtime thread per core, the worker's default.
    assert r["modes"]["local"]["intra_threads"] == (os.cpu_count() or 1)
    # How far the games got in the window: 1.5 s of 8-visit searches on 7x7 move them on.
    positive(r, "searches_per_game")
    # The raw figure the ratios divide by brackets the self-play: measured before and after.
    positive(r, "raw_fp32_evals_per_s_before", "raw_fp32_evals_per_s_after")
    mean = (r["raw_fp32_evals_per_s_before"] + r["raw_fp32_evals_per_s_after"]) / 2
    assert r["raw_fp32_evals_per_s"] == pytest.approx(mean)
    assert r["evals_over_raw"] == pytest.approx(r["nn_evals_per_s"] / mean)
    assert r["raw_drift"] == pytest.approx(
        abs(r["raw_fp32_evals_per_s_after"] - r["raw_fp32_evals_per_s_before"]) / mean
    )
    # Root visits (KataGo's count: the reused subtree included) scale the new visits by the
    # share of the finished searches' root visits that were reused.
    assert 0 <= r["reused_share"] < 1
    assert r["root_visits_per_s"] == pytest.approx(r["visits_per_s"] / (1 - r["reused_share"]))
    assert r["root_visits_over_raw_fp32"] == pytest.approx(r["root_visits_per_s"] / mean)
    # No batch above --max-batch (a native game set of 2 games x 8 leaves would ask for 16):
    # the batch the raw figures the run is compared with are measured at.
    assert r["raw_batch"] == 8
    assert 0 < r["mean_batch_size"] <= 8
    # The worker's evaluation cache is on, as a worker runs, and its hits are reported apart.
    from kgrpc.programs.bench.selfplay import EVAL_CACHE_POSITIONS
    from kgrpc.worker.runner import EVAL_CACHE_POSITIONS as WORKER_CACHE

    assert EVAL_CACHE_POSITIONS == WORKER_CACHE
    if r["engine"] == "native":
        assert r["cache_positions"] == WORKER_CACHE and r["cache_hits_per_s"] >= 0


def test_selfplay_int8_against_raw_fp32(tmp_path: Path, tiny_model: Path) -> None:
    from kgrpc.precision import variant_path

    r = bench(
        tmp_path,
        "selfplay",
        "--model",
        str(tiny_model),
        "--board-size",
        "7",
        "--parallel-games",
        "4",
        "--visits",
        "8",
        "--seconds",
        "1.5",
        "--modes",
        "local",
        "--precision",
        "int8",
    )
    positive(r, "visits_per_s", "raw_evals_per_s", "raw_fp32_evals_per_s", "visits_over_raw_fp32")
    assert r["precision"] == "int8"
    assert r["visits_over_raw_fp32"] == pytest.approx(r["visits_per_s"] / r["raw_fp32_evals_per_s"])
    assert not variant_path(tiny_model, "int8").exists()  # converted in a temporary folder


def test_selfplay_with_the_gumbel_search(tmp_path: Path, tiny_model: Path) -> None:
    args = ["--model", str(tiny_model), "--board-size", "7", "--parallel-games", "4"]
    r = bench(tmp_path, "selfplay", *args, "--visits", "8", "--seconds", "1.5", "--gumbel")
    positive(r, "visits_per_s", "nn_evals_per_s")
    assert r["search"] == "gumbel"


def test_selfplay_intra_threads_reach_the_session(tmp_path: Path, tiny_model: Path) -> None:
    """--intra-threads sets the ONNX Runtime threads of the in-process evaluator (read back
    from the session), as the worker's flag of that name does (0, one per core: test_selfplay)."""
    args = ["--model", str(tiny_model), "--board-size", "7", "--parallel-games", "2"]
    args += ["--visits", "4", "--seconds", "0.5", "--modes", "local"]
    one = bench(tmp_path, "selfplay", *args, "--intra-threads", "1")
    assert one["intra_threads"] == 1 and one["modes"]["local"]["intra_threads"] == 1
    bad = [sys.executable, "-m", "kgrpc.programs.bench.cli", "selfplay", *args]
    proc = subprocess.run([*bad, "--intra-threads", "-1"], capture_output=True, text=True)
    assert proc.returncode != 0 and "--intra-threads must be >= 0" in proc.stderr


def test_train(tmp_path: Path) -> None:
    r = bench(
        tmp_path,
        "train",
        "--blocks",
        "1",
        "--channels",
        "8",
        "--board-size",
        "7",
        "--batch-size",
        "32",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--rows",
        "256",
    )
    positive(r, "samples_per_s")
    assert 0.0 <= r["data_wait_share"] <= 1.0
    assert (r["autocast"], r["bf16"], r["channels_last"]) == ("off", False, False)


def test_train_in_bf16_channels_last(tmp_path: Path) -> None:
    args = ("--blocks", "1", "--channels", "8", "--board-size", "7", "--batch-size", "32")
    r = bench(
        tmp_path,
        "train",
        *args,
        "--steps",
        "2",
        "--warmup",
        "1",
        "--rows",
        "256",
        "--autocast",
        "bf16",
        "--channels-last",
    )
    positive(r, "samples_per_s")
    assert (r["autocast"], r["bf16"], r["channels_last"]) == ("bf16", True, True)


def test_report_collects_figures_and_targets(tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kgrpc.programs.bench.cli",
            "all",
            "--out",
            str(out),
            "--only",
            "rules",
            "--seconds",
            "0.3",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["results"]["rules"]["playout_moves_per_s_9"] > 0 and not report["failures"]
    text = (out / "report.md").read_text()
    assert "playout_moves_per_s_9" in text
    assert "| yes |" in text or "| no |" in text
    assert "cpu_flags" in report["machine"]  # int8 figures depend on VNNI


def test_every_report_target_has_a_benchmark_that_writes_its_figures(tmp_path: Path) -> None:
    from kgrpc.programs.bench.report import TARGETS, plan

    written = {
        Path(cmd[cmd.index("--json") + 1]).stem
        for cmds in plan(tmp_path, 1.0, quick=False).values()
        for cmd in cmds
        if "--json" in cmd
    }
    missing = sorted({t.bench for t in TARGETS} - written)
    assert not missing, f"targets whose benchmark make bench never runs: {missing}"


def test_bench_compare_runs_both_checkouts_with_one_interpreter(tmp_path: Path) -> None:
    """scripts/bench_compare.py --python: each checkout's own bench module (found by where
    it lives) with a shared interpreter; one row per figure both runs printed."""
    root = Path(__file__).resolve().parents[1]
    old = tmp_path / "old" / "kgrpc" / "bench"
    old.mkdir(parents=True)
    (old / "cli.py").write_text("")
    sys.path.insert(0, str(root / "scripts"))
    try:
        import bench_compare
    finally:
        sys.path.remove(str(root / "scripts"))
    assert bench_compare.bench_command(root, Path("py"))[1:] == ["-m", "kgrpc.programs.bench.cli"]
    assert bench_compare.bench_command(tmp_path / "old", Path("py"))[1:] == [
        "-m",
        "kgrpc.bench.cli",
    ]
    with pytest.raises(SystemExit, match="no kgrpc-bench module"):
        bench_compare.bench_command(tmp_path, Path("py"))
    assert [bench_compare.run_order(i) for i in range(3)] == [("a", "b"), ("b", "a"), ("a", "b")]
    assert bench_compare.lower_is_better("validate_s_per_game")
    assert not bench_compare.lower_is_better("games_per_s")
    cmd = [sys.executable, str(root / "scripts" / "bench_compare.py"), "--a", str(root)]
    cmd += ["--b", str(root), "--python", sys.executable, "--bench", "rules", "--runs", "1"]
    cmd += ["--tolerance", "100", "--bench-args", "--seconds 0.2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("playout_moves")]
    assert rows and all(r[-1] == "yes" and float(r[1]) > 0 for r in rows), proc.stdout
