"""``kgrpc-cluster``: the whole training loop on one machine (what ``make demo`` runs).

Starts, as separate processes on loopback ports, a coordinator (data dir = ``--data-dir``),
an inference server following its releases, ``--workers`` self-play workers and the trainer,
after publishing a randomly initialised first model. It shows a live view of games,
positions, models, Elo and throughput until the trainer has exported ``--generations``
candidates and the last gating match is decided, then stops everything, plays a short
evaluation (newest released model against the first one, and against random play) and prints
a summary with where the data, models and logs are.

Layout of ``--data-dir`` (the coordinator's data dir, see docs/coordinator.md)::

    models/NAME.onnx           every published model (released, candidate or rejected)
    training_data/run_001/     shards (games_00001.npz, ...), current/latest_games.npz
    logs/*.log                 one log per process
    trainer/                   checkpoints and the loss CSV
    worker-<i>/                spool, model cache and log of each worker
    ladder/                    the rating ladder (--ladder-games): ladder.csv/.md/.png, games
    cluster-summary.json       the final summary, machine-readable

Ctrl-C stops every process cleanly (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc


@dataclass
class ClusterConfig:
    data_dir: str = "demo-data"
    board_size: int = 9
    workers: int = 2
    generations: int = 3
    blocks: int = 2
    channels: int = 32
    visits: int = 24
    parallel_games: int = 16
    gating_games: int = 16
    gating_elo_threshold: float = 20.0
    steps_per_generation: int = 300
    min_new_rows: int = 8000
    batch_size: int = 128
    learning_rate: float = 1e-3
    komi: float = 7.5
    eval_games: int = 10
    ladder_games: int = 0
    max_minutes: float = 30.0
    fresh: bool = True
    view: str = "auto"  # auto | live | plain

    def check(self) -> None:
        if not 2 <= self.board_size <= 19:
            raise ValueError(f"--board-size must be between 2 and 19, got {self.board_size}")
        if self.workers < 1 or self.generations < 1:
            raise ValueError("--workers and --generations must be >= 1")
        if self.gating_games < 2 or self.gating_games % 2:
            raise ValueError("--gating-games must be even and >= 2")


def parse_args(argv: list[str] | None) -> ClusterConfig:
    d = ClusterConfig()
    p = argparse.ArgumentParser(
        prog="kgrpc-cluster",
        description="Run the whole kgrpc loop locally: coordinator, inference server, workers "
        "and trainer on loopback, for a few generations (self-play -> train -> publish -> "
        "gating -> release), with a live view and a final summary.",
    )
    p.add_argument("--data-dir", default=d.data_dir, help=f"where everything goes (default {d.data_dir})")
    p.add_argument("--board-size", type=int, default=d.board_size, help=f"board size (default {d.board_size})")
    p.add_argument("--workers", type=int, default=d.workers, help=f"self-play workers (default {d.workers})")
    p.add_argument("--generations", type=int, default=d.generations,
                   help=f"candidates the trainer exports before the run ends (default {d.generations})")
    p.add_argument("--blocks", type=int, default=d.blocks, help=f"residual blocks (default {d.blocks})")
    p.add_argument("--channels", type=int, default=d.channels, help=f"channels (default {d.channels})")
    p.add_argument("--visits", type=int, default=d.visits, help=f"visits per full search (default {d.visits})")
    p.add_argument("--parallel-games", type=int, default=d.parallel_games,
                   help=f"games each worker plays at once (default {d.parallel_games})")
    p.add_argument("--gating-games", type=int, default=d.gating_games,
                   help=f"games of each gating match (default {d.gating_games})")
    p.add_argument("--gating-elo-threshold", type=float, default=d.gating_elo_threshold,
                   help=f"Elo a candidate must gain to be released (default {d.gating_elo_threshold})")
    p.add_argument("--steps-per-generation", type=int, default=d.steps_per_generation,
                   help=f"training steps per candidate (default {d.steps_per_generation})")
    p.add_argument("--min-new-rows", type=int, default=d.min_new_rows,
                   help=f"new positions needed before each training round (default {d.min_new_rows})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"training batch (default {d.batch_size})")
    p.add_argument("--learning-rate", type=float, default=d.learning_rate,
                   help=f"Adam learning rate (default {d.learning_rate})")
    p.add_argument("--komi", type=float, default=d.komi, help=f"komi (default {d.komi})")
    p.add_argument("--eval-games", type=int, default=d.eval_games,
                   help=f"games of each final evaluation match (default {d.eval_games}; 0 = none)")
    p.add_argument("--ladder-games", type=int, default=d.ladder_games,
                   help="games per pairing of a rating ladder played during the run (kgrpc-eval "
                        "ladder --follow: each release against random play, the first model and "
                        "GNU Go level 1 when installed; results in the live view, the summary "
                        "and DATA_DIR/ladder); 0 = none (default)")
    p.add_argument("--max-minutes", type=float, default=d.max_minutes,
                   help=f"give up after this long (default {d.max_minutes})")
    p.add_argument("--keep", dest="fresh", action="store_false",
                   help="keep an existing data dir (default: start from a fresh one)")
    p.add_argument("--view", choices=["auto", "live", "plain"], default=d.view,
                   help="live: redraw a table; plain: a status line every 15 s; auto: live on a terminal")
    ns = p.parse_args(argv)
    cfg = ClusterConfig(**{k: v for k, v in vars(ns).items() if k in ClusterConfig.__dataclass_fields__})
    try:
        cfg.check()
    except ValueError as exc:
        p.error(str(exc))
    return cfg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Child:
    name: str
    proc: asyncio.subprocess.Process
    log: Path
    expected_exit: bool = False  # a process that ends by itself (the trainer)


@dataclass
class Snapshot:
    """What the live view shows, from the coordinator's GetStats."""

    stats: coordinator_pb2.Stats | None = None
    at: float = 0.0
    history: list[tuple[float, int, int]] = field(default_factory=list)  # (t, games, positions)


class ClusterError(RuntimeError):
    pass


class Cluster:
    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.root = Path(cfg.data_dir).resolve()
        self.logs = self.root / "logs"
        self.children: list[Child] = []
        self.snapshot = Snapshot()
        self.started = time.monotonic()
        self.address = ""
        self.worker_token = ""
        self.trainer_token = ""
        self.live = cfg.view == "live" or (cfg.view == "auto" and sys.stdout.isatty())
        self.python = sys.executable

    # ----------------------------------------------------------------- processes
    def _env(self, threads: int = 1) -> dict[str, str]:
        env = dict(os.environ)
        # Five busy processes share the machine: one compute thread each keeps them from
        # oversubscribing the cores (ONNX Runtime and torch default to all cores).
        env.update(PYTHONUNBUFFERED="1", GRPC_VERBOSITY="ERROR", OMP_NUM_THREADS=str(threads),
                   MKL_NUM_THREADS=str(threads))
        return env

    async def _spawn(self, name: str, args: list[str], *, expected_exit: bool = False,
                     threads: int = 1) -> Child:
        log = self.logs / f"{name}.log"
        fh = open(log, "ab")  # noqa: SIM115 - the child owns it until it exits
        proc = await asyncio.create_subprocess_exec(
            self.python, *args, stdout=fh, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL, env=self._env(threads), cwd=self.root,
            start_new_session=True,  # Ctrl-C reaches us only; we stop children in order
        )
        fh.close()
        child = Child(name, proc, log, expected_exit)
        self.children.append(child)
        return child

    async def _run_once(self, name: str, args: list[str]) -> str:
        proc = await asyncio.create_subprocess_exec(
            self.python, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=self._env(), cwd=self.root)
        out, err = await proc.communicate()
        (self.logs / f"{name}.log").write_bytes(out + err)
        if proc.returncode != 0:
            raise ClusterError(f"{name} failed (exit {proc.returncode}): {err.decode()[-800:]}")
        return out.decode()

    async def stop_children(self, grace_s: float = 15.0) -> None:
        # The ladder and workers first (they flush their spool), then trainer, inference,
        # coordinator last.
        order = sorted(self.children, key=lambda c: ("ladder", "worker", "trainer", "inference",
                                                     "coordinator").index(c.name.split("-")[0]))
        for child in order:
            if child.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(child.proc.wait(), grace_s)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.kill()
                    await child.proc.wait()

    def _check_children(self) -> None:
        for c in self.children:
            rc = c.proc.returncode
            if rc is not None and not (c.expected_exit and rc == 0):
                tail = c.log.read_text(errors="replace")[-1500:] if c.log.exists() else ""
                raise ClusterError(f"{c.name} exited with code {rc}; last lines of {c.log}:\n{tail}")

    # ----------------------------------------------------------------- setup
    def _write_coordinator_config(self) -> Path:
        c = self.cfg
        path = self.root / "coordinator.toml"
        path.write_text(
            f'run = "run_001"\n'
            f"komi = {c.komi}\n"
            f"positions_per_shard = {max(200, c.min_new_rows // 4)}\n"
            f"flush_interval_s = 10.0\n"
            f"latest_window_positions = 50000\n"
            f"games_per_batch = 4\n"
            f"selfplay_task_games = {4 * c.parallel_games}\n"
            f"full_search_prob = 0.5\n"
            f"cheap_visits = {max(4, c.visits // 4)}\n"
            f"max_moves_per_point = 1.5\n"
            f"heartbeat_interval_s = 5\n"
            f"retry_after_s = 2\n"
            f"gating_games = {c.gating_games}\n"
            f"match_chunk_games = {min(c.gating_games, 2 * max(1, c.parallel_games // 4))}\n"
            f"gating_elo_threshold = {c.gating_elo_threshold}\n"
            f"release_every_steps = 0\n"
            f'curriculum = "0:{c.board_size}:{c.visits}"\n'
        )
        return path

    async def setup(self) -> None:
        c = self.cfg
        if c.fresh and self.root.exists():
            shutil.rmtree(self.root)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.say(f"data dir {self.root}")
        self.worker_token = (await self._run_once(
            "token-worker", ["-m", "kgrpc.coordinator", "token", "create", "--data-dir", str(self.root),
                             "--role", "worker", "--label", "cluster-workers"])).strip().splitlines()[-1]
        self.trainer_token = (await self._run_once(
            "token-trainer", ["-m", "kgrpc.coordinator", "token", "create", "--data-dir", str(self.root),
                              "--role", "trainer", "--label", "cluster-trainer"])).strip().splitlines()[-1]
        config = self._write_coordinator_config()
        port_file = self.root / "coordinator.port"
        port_file.unlink(missing_ok=True)
        await self._spawn("coordinator", ["-m", "kgrpc.coordinator", "serve", "--listen", "127.0.0.1:0",
                                          "--data-dir", str(self.root), "--config", str(config)])
        for _ in range(300):
            self._check_children()
            if port_file.exists() and port_file.read_text().strip():
                break
            await asyncio.sleep(0.1)
        else:
            raise ClusterError("the coordinator did not start within 30 s (see logs/coordinator.log)")
        bound = port_file.read_text().strip()  # "host:port" of the bound socket
        self.address = bound if ":" in bound else f"127.0.0.1:{bound}"
        self.say(f"coordinator on {self.address}")

        first = self.root / "initial" / f"kg-b{c.blocks}c{c.channels}-s0-d0.onnx"
        first.parent.mkdir(exist_ok=True)
        await self._run_once("init", ["-m", "trainer", "init", "--board-size", str(c.board_size),
                                      "--blocks", str(c.blocks), "--channels", str(c.channels),
                                      "--out", str(first)])
        await self._run_once("publish-initial", ["-m", "trainer", "publish", str(first), "--coordinator",
                                                 self.address, "--token", self.trainer_token])
        self.say(f"published the random first model {first.stem} (released without gating)")

        inference_addr = f"127.0.0.1:{free_port()}"
        await self._spawn("inference", ["-m", "inference", "--listen", inference_addr, "--coordinator",
                                        self.address, "--token", self.worker_token, "--model-dir",
                                        str(self.root / "inference-models"), "--intra-threads", "1",
                                        "--max-batch", str(max(8, c.workers * c.parallel_games)),
                                        "--log-every-s", "30"])
        self.say(f"inference server on {inference_addr}")
        for i in range(c.workers):
            await self._spawn(f"worker-{i + 1}", [
                "-m", "kgrpc.worker", "--coordinator", self.address, "--token", self.worker_token,
                "--inference", inference_addr, "--parallel-games", str(c.parallel_games),
                "--username", f"demo-{i + 1}", "--work-dir", str(self.root / f"worker-{i + 1}"),
                "--seed", str(1000 + i), "--quiet"])
        self.say(f"{c.workers} workers started")
        await self._spawn("trainer", [
            "-m", "trainer", "run", "--coordinator", self.address, "--token", self.trainer_token,
            "--data-dir", str(self.root), "--work-dir", str(self.root / "trainer"),
            "--blocks", str(c.blocks), "--channels", str(c.channels),
            "--generations", str(c.generations), "--steps-per-generation", str(c.steps_per_generation),
            "--min-new-rows", str(c.min_new_rows), "--batch-size", str(c.batch_size),
            "--lr", str(c.learning_rate), "--poll-interval-s", "5", "--log-every-s", "15"],
            expected_exit=True)
        self.say("trainer started")
        if c.ladder_games > 0:
            from kgrpc.eval.remote import follow_args

            await self._spawn("ladder", follow_args(self.address, self.trainer_token,
                                                    c.ladder_games, c.board_size, c.komi,
                                                    c.visits, self.root / "ladder"))
            self.say(f"rating ladder started ({c.ladder_games} games per pairing)")

    # ----------------------------------------------------------------- watching
    async def poll_stats(self, stub: coordinator_pb2_grpc.CoordinatorStub) -> coordinator_pb2.Stats:
        stats = await stub.GetStats(coordinator_pb2.GetStatsRequest(), timeout=10)
        now = time.monotonic()
        self.snapshot.stats = stats
        self.snapshot.at = now
        self.snapshot.history.append((now, stats.games_accepted, stats.positions_accepted))
        self.snapshot.history = [h for h in self.snapshot.history if now - h[0] <= 60]
        return stats

    def _rates(self) -> tuple[float, float]:
        h = self.snapshot.history
        if len(h) < 2 or h[-1][0] - h[0][0] < 1:
            return 0.0, 0.0
        dt = h[-1][0] - h[0][0]
        return (h[-1][1] - h[0][1]) / dt, (h[-1][2] - h[0][2]) / dt

    def render(self) -> str:
        s = self.snapshot.stats
        elapsed = time.monotonic() - self.started
        head = f"kgrpc-cluster  {self.cfg.board_size}x{self.cfg.board_size}  {_fmt_s(elapsed)}  " \
               f"coordinator {self.address}  data {self.root}"
        if s is None:
            return head + "\n(waiting for the coordinator)"
        gps, pps = self._rates()
        moves = sum(w.stats.moves_per_s for w in s.workers)
        visits = sum(w.stats.visits_per_s for w in s.workers)
        evals = sum(w.stats.nn_evals_per_s for w in s.workers)
        batch = [w.stats.mean_batch_size for w in s.workers if w.stats.mean_batch_size]
        lines = [
            head,
            f"games     accepted {s.games_accepted:>7}  rejected {s.games_rejected:>4}  "
            f"duplicate {s.games_duplicate:>4}   {gps:6.2f} games/s",
            f"positions accepted {s.positions_accepted:>7}  shards {s.shards_written:>4}   "
            f"{pps:8.1f} positions/s",
            f"workers   {len(s.workers)}: {moves:7.1f} moves/s  {visits:8.1f} visits/s  "
            f"{evals:8.1f} NN evals/s  mean batch {sum(batch) / len(batch) if batch else 0:5.1f}",
            "",
            f"{'model':<34}{'status':<11}{'Elo':>8}{'steps':>8}{'rows':>9}",
        ]
        for m in sorted(s.models, key=lambda m: m.created_unix_ms):
            lines.append(f"{m.name:<34}{_status(m.status):<11}{m.elo:>8.1f}"
                         f"{m.training_steps:>8}{m.training_rows:>9}")
        if s.matches:
            lines += ["", f"{'gating: candidate':<34}{'W-L-D':>10}{'Elo (95% CI)':>26}  decision"]
            for m in s.matches:
                lines.append(f"{m.candidate_model:<34}{f'{m.wins}-{m.losses}-{m.draws}':>10}"
                             f"{_ci(m.elo_diff, m.elo_low, m.elo_high):>26}  {m.decision}")
        if s.workers:
            lines += ["", f"{'worker':<12}{'games':>7}{'moves/s':>9}{'visits/s':>10}  model"]
            for w in s.workers:
                lines.append(f"{w.username[:11]:<12}{w.games_accepted:>7}{w.stats.moves_per_s:>9.1f}"
                             f"{w.stats.visits_per_s:>10.1f}  {w.stats.current_model}")
        from kgrpc.eval.curve import newest_line, records_from_stats

        if ladder := newest_line(records_from_stats(s)):
            lines += ["", ladder]
        trainer = next((c for c in self.children if c.name == "trainer"), None)
        if trainer is not None:
            lines += ["", f"trainer: {_last_line(trainer.log)}"]
        return "\n".join(lines)

    def say(self, text: str) -> None:
        print(f"[{_fmt_s(time.monotonic() - self.started)}] {text}", flush=True)

    def _show(self, last_plain: float) -> float:
        if self.live:
            sys.stdout.write("\x1b[H\x1b[2J" + self.render() + "\n")
            sys.stdout.flush()
            return last_plain
        if time.monotonic() - last_plain >= 15:
            s = self.snapshot.stats
            if s is not None:
                released = sum(1 for m in s.models if m.status == common_pb2.MODEL_STATUS_RELEASED)
                gps, _ = self._rates()
                self.say(f"games {s.games_accepted} ({gps:.2f}/s), positions {s.positions_accepted}, "
                         f"shards {s.shards_written}, models {len(s.models)} ({released} released), "
                         f"pending matches {sum(1 for m in s.matches if m.decision == 'pending')}")
            return time.monotonic()
        return last_plain

    async def watch(self, stop: asyncio.Event) -> None:
        """Until the trainer is done and no gating match is pending (or stop / timeout)."""
        from kgrpc.net import make_channel

        deadline = self.started + self.cfg.max_minutes * 60
        last_plain = 0.0
        async with make_channel(self.address, token=self.worker_token) as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            while not stop.is_set():
                self._check_children()
                with contextlib.suppress(Exception):
                    await self.poll_stats(stub)
                last_plain = self._show(last_plain)
                trainer = next(c for c in self.children if c.name == "trainer")
                s = self.snapshot.stats
                if trainer.proc.returncode == 0 and s is not None and self._loop_done(s):
                    return
                if time.monotonic() > deadline:
                    raise ClusterError(f"not finished after {self.cfg.max_minutes} minutes "
                                       "(raise --max-minutes, or see the logs)")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 2.0)

    def _loop_done(self, s: coordinator_pb2.Stats) -> bool:
        """Every candidate decided, and every worker playing with the newest release."""
        published = [m for m in s.models if m.training_steps > 0]
        if len(published) < self.cfg.generations:
            return False
        if any(m.status == common_pb2.MODEL_STATUS_CANDIDATE for m in s.models):
            return False
        newest = latest_release(s)
        if self.cfg.ladder_games > 0 and newest is not None:
            from kgrpc.eval.remote import follow_done

            if not follow_done(s, newest.name):  # the ladder has not rated it yet
                return False
        now_ms = time.time() * 1000
        live = [w for w in s.workers if now_ms - w.last_heartbeat_unix_ms < 60_000]
        return newest is not None and len(live) >= self.cfg.workers and all(
            w.stats.current_model == newest.name for w in live)

    # ----------------------------------------------------------------- the end
    async def evaluate(self, stats: coordinator_pb2.Stats) -> dict:
        """Newest released model vs the first one, and vs random play (in-process)."""
        released = sorted((m for m in stats.models if m.status == common_pb2.MODEL_STATUS_RELEASED),
                          key=lambda m: m.released_unix_ms or m.created_unix_ms)
        out: dict = {}
        if not released or self.cfg.eval_games <= 0:
            return out
        first, last = released[0], released[-1]
        models = self.root / "models"
        games = self.cfg.eval_games
        self.say(f"evaluating {last.name}: {games} games against random play")
        out["vs_random"] = await play_vs_random(models / f"{last.name}.onnx", self.cfg, games)
        if last.name != first.name:
            self.say(f"evaluating {last.name} against {first.name}: {games} games")
            out["vs_first"] = await play_model_match(models / f"{last.name}.onnx",
                                                     models / f"{first.name}.onnx", self.cfg, games)
            out["vs_first"]["opponent"] = first.name
        out["model"] = last.name
        return out

    def summary(self, stats: coordinator_pb2.Stats, evaluation: dict) -> str:
        lines = ["", "=" * 78, "kgrpc-cluster summary", "=" * 78,
                 f"elapsed {_fmt_s(time.monotonic() - self.started)}; games accepted "
                 f"{stats.games_accepted} (rejected {stats.games_rejected}), positions "
                 f"{stats.positions_accepted}, shards {stats.shards_written}", "",
                 f"{'model':<34}{'status':<11}{'Elo vs first':>13}{'steps':>8}{'rows':>9}"]
        for m in sorted(stats.models, key=lambda m: m.created_unix_ms):
            lines.append(f"{m.name:<34}{_status(m.status):<11}{m.elo:>13.1f}"
                         f"{m.training_steps:>8}{m.training_rows:>9}")
        if stats.matches:
            lines += ["", f"{'gating: candidate':<34}{'reference':<28}{'W-L-D':>9}{'Elo (95% CI)':>24}  decision"]
            for m in stats.matches:
                lines.append(f"{m.candidate_model:<34}{m.reference_model:<28}"
                             f"{f'{m.wins}-{m.losses}-{m.draws}':>9}"
                             f"{_ci(m.elo_diff, m.elo_low, m.elo_high):>24}  {m.decision}")
        if evaluation:
            lines += ["", f"final evaluation of {evaluation['model']}:"]
            for key, label in (("vs_random", "random play"), ("vs_first", "the first model")):
                r = evaluation.get(key)
                if r:
                    opp = r.get("opponent", label)
                    lines.append(f"  vs {opp:<32} won {r['wins']}/{r['games']} "
                                 f"(lost {r['losses']}, drawn {r['draws']})")
        if stats.ratings or self.cfg.ladder_games > 0:
            from kgrpc.eval.curve import records_from_stats, summary_lines

            lines += ["", *summary_lines(records_from_stats(stats), self.root / "ladder")]
        lines += ["", f"data      {self.root / 'training_data'}", f"models    {self.root / 'models'}",
                  f"logs      {self.logs}", f"summary   {self.root / 'cluster-summary.json'}"]
        return "\n".join(lines)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        interrupts = 0

        def on_signal() -> None:
            nonlocal interrupts
            interrupts += 1
            stop.set()
            if interrupts > 1:  # a second Ctrl-C: no more waiting
                for c in self.children:
                    with contextlib.suppress(ProcessLookupError):
                        c.proc.kill()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        try:
            await self.setup()
            await self.watch(stop)
            if stop.is_set():
                self.say("interrupted: stopping every process")
                await self.stop_children()
                return 130
            stats = self.snapshot.stats
            self.say("generations done: stopping workers, inference server, coordinator")
            await self.stop_children()
            evaluation = await self.evaluate(stats) if stats is not None else {}
            text = self.summary(stats, evaluation) if stats is not None else ""
            print(text, flush=True)
            _write_json(self.root / "cluster-summary.json", {
                "config": asdict(self.cfg),
                "stats": _stats_dict(stats) if stats is not None else {},
                "evaluation": evaluation,
            })
            return 0
        except ClusterError as exc:
            print(f"kgrpc-cluster: {exc}", file=sys.stderr, flush=True)
            await self.stop_children()
            return 1
        finally:
            if any(c.proc.returncode is None for c in self.children):
                await self.stop_children()


# --------------------------------------------------------------------- evaluation matches
async def play_model_match(model_a: Path, model_b: Path, cfg: ClusterConfig, games: int) -> dict:
    """``model_a`` against ``model_b``, alternating colours; counts from model_a's side."""
    from inference.local import LocalEvaluator
    from kgrpc.go.rules import CHINESE
    from kgrpc.mcts.config import SearchConfig, SelfPlayConfig
    from kgrpc.mcts.selfplay import play_match_game

    a = LocalEvaluator(str(model_a))
    b = LocalEvaluator(str(model_b))
    config = SelfPlayConfig(search=SearchConfig(visits=cfg.visits))
    result = {"games": games, "wins": 0, "losses": 0, "draws": 0}
    try:
        tasks = []
        for g in range(games):
            a_black = g % 2 == 0
            tasks.append(play_match_game(a if a_black else b, b if a_black else a, cfg.board_size,
                                         CHINESE, cfg.komi, config, seed=g))
        for g, played in enumerate(await asyncio.gather(*tasks)):
            winner = played.record.result.winner
            a_color = common_pb2.COLOR_BLACK if g % 2 == 0 else common_pb2.COLOR_WHITE
            if winner == common_pb2.COLOR_UNSPECIFIED:
                result["draws"] += 1
            elif winner == a_color:
                result["wins"] += 1
            else:
                result["losses"] += 1
    finally:
        await a.close()
        await b.close()
    return result


async def play_vs_random(model: Path, cfg: ClusterConfig, games: int) -> dict:
    """MCTS with ``model`` against a uniformly random player that never fills its own eyes."""
    from inference.local import LocalEvaluator
    from kgrpc.go.board import BLACK, Board
    from kgrpc.go.playout import random_move
    from kgrpc.go.rules import CHINESE
    from kgrpc.mcts.config import SearchConfig
    from kgrpc.mcts.player import MctsPlayer

    evaluator = LocalEvaluator(str(model))
    result = {"games": games, "wins": 0, "losses": 0, "draws": 0}
    max_moves = int(1.5 * cfg.board_size * cfg.board_size)

    async def one(g: int) -> float:
        player = MctsPlayer(evaluator, SearchConfig(visits=cfg.visits), seed=g)
        rng = random.Random(g)
        board = Board(cfg.board_size, CHINESE, cfg.komi, max_moves=max_moves)
        model_color = BLACK if g % 2 == 0 else -BLACK
        while not board.is_over():
            if board.to_play == model_color:
                move = await player.choose_async(board)
            else:
                move = random_move(board, rng)
            board.play(move)
        return board.score() * model_color

    try:
        for margin in await asyncio.gather(*(one(g) for g in range(games))):
            key = "wins" if margin > 0 else "losses" if margin < 0 else "draws"
            result[key] += 1
    finally:
        await evaluator.close()
    return result


# --------------------------------------------------------------------- small helpers
def latest_release(stats: coordinator_pb2.Stats) -> common_pb2.ModelInfo | None:
    released = [m for m in stats.models if m.status == common_pb2.MODEL_STATUS_RELEASED]
    return max(released, key=lambda m: (m.released_unix_ms, m.training_steps), default=None)


def _status(status: int) -> str:
    return common_pb2.ModelStatus.Name(status).removeprefix("MODEL_STATUS_").lower()


def _ci(elo: float, low: float, high: float) -> str:
    def f(x: float) -> str:
        return "inf" if math.isinf(x) and x > 0 else "-inf" if math.isinf(x) else f"{x:.0f}"

    return f"{f(elo)} [{f(low)}, {f(high)}]"


def _fmt_s(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m:02d}:{s:02d}"


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln for ln in f.read().decode(errors="replace").replace("\r", "\n").splitlines() if ln.strip()]
        return lines[-1][-100:] if lines else "(starting)"
    except OSError:
        return "(no log yet)"


def _stats_dict(stats: coordinator_pb2.Stats) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(stats, preserving_proto_field_name=True)


def _write_json(path: Path, data: dict) -> None:
    from kgrpc.durable import atomic_write_bytes

    atomic_write_bytes(path, (json.dumps(data, indent=2) + "\n").encode())


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    return asyncio.run(Cluster(cfg).run())


if __name__ == "__main__":
    sys.exit(main())
