"""One ``kgrpc-cluster`` run: set up the coordinator and the first model, start the daemons,
watch until every generation is trained and gated (or, with ``--generations 0``, until
``--max-minutes``), stop them, evaluate (and rate the newest release on the final ladder)
and summarise.

With ``--tls`` every connection is TLS: a private CA and the servers' certificate are made in
``DATA_DIR/tls`` (:mod:`kgrpc.net.certs`), the coordinator and the inference server serve it,
every client trusts the CA. Tokens and TLS files reach the daemons in their environment
(``KGRPC_<PROGRAM>_TOKEN`` ...), never on their command lines.

The data dir must already be claimed (:func:`kgrpc.programs.cluster.datadir.prepare_data_dir`,
which :mod:`kgrpc.programs.cluster.main` calls first).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from pathlib import Path

from kgrpc.coordinator.web import HTTP_FILE
from kgrpc.net.certs import TlsFiles
from kgrpc.programs.cluster.display import Display, Snapshot
from kgrpc.programs.cluster.evaluate import evaluate_newest
from kgrpc.programs.cluster.final_ladder import FinalLadder, model_facts, run_final_ladder
from kgrpc.programs.cluster.options import ClusterConfig
from kgrpc.programs.cluster.summary import summary_text, write_summary_json
from kgrpc.programs.cluster.supervise import ClusterError, Supervisor, free_port
from kgrpc.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

# ONNX Runtime threads of each process that runs the net (the inference server, or each worker
# with --worker-inference local): one, as the trainer has one torch thread (supervise.py), so
# the processes do not oversubscribe the cores. On 2 cores beside a busy process, the
# worker's default (one thread per core) searched 21-26% slower than one thread, and with one
# thread the learn9 loop played 28% more games with as many training steps
# (docs/training.md, "One engine thread in the worker").
ENGINE_THREADS = 1
# The OS priority of --spare-workers: Linux's SCHED_IDLE (kgrpc-worker --idle), whose tasks
# weigh 3 against a nice-0 task's 1024 and are preempted whenever a normal task wakes, so the
# trainer and the first worker get a core back the moment they want it. At nice 19 alone
# (weight 15) a spare worker took 62% of a core 20 minutes into a 2-hour learn9 run, and the
# trainer fell below its samples-per-row cap (docs/results/learn9-spare-2h). Nice 19 as well,
# for the disk priority Linux derives from it and for top's column.
SPARE_WORKER_NICE = 19


class Cluster:
    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.root = Path(cfg.data_dir).resolve()
        self.logs = self.root / "logs"
        self.started = time.monotonic()
        self.procs = Supervisor(self.root, self.logs)
        self.snapshot = Snapshot()
        live = cfg.view == "live" or (cfg.view == "auto" and sys.stdout.isatty())
        self.display = Display(cfg.board_size, self.root, live, self.started)
        self.say = self.display.say
        self.address = ""
        self.worker_token = ""
        self.trainer_token = ""
        self.tls: TlsFiles | None = None  # --tls: the private CA and the servers' pair

    # ----------------------------------------------------------------- setup
    def _write_coordinator_config(self) -> Path:
        path = self.root / "coordinator.toml"
        path.write_text(
            "".join(f"{k} = {toml_value(v)}\n" for k, v in self.cfg.coordinator_settings().items())
        )
        return path

    async def _create_token(self, role: str, label: str) -> str:
        out = await self.procs.run_once(
            f"token-{role}",
            [
                "-m",
                "kgrpc.coordinator",
                "token",
                "create",
                "--data-dir",
                str(self.root),
                "--role",
                role,
                "--label",
                label,
            ],
        )
        return out.strip().splitlines()[-1]

    async def _start_coordinator(self) -> None:
        config = self._write_coordinator_config()
        port_file = self.root / "coordinator.port"
        port_file.unlink(missing_ok=True)
        http = self.cfg.http_listen
        if http:
            from kgrpc.net.metrics import require

            try:
                require()
            except RuntimeError as exc:
                self.say(f"no dashboard: {exc}")
                http = ""
        http_file = self.root / HTTP_FILE
        http_file.unlink(missing_ok=True)
        serve_tls = (
            []
            if self.tls is None
            else ["--tls-cert", str(self.tls.cert), "--tls-key", str(self.tls.key)]
        )
        await self.procs.spawn(
            "coordinator",
            [
                "-m",
                "kgrpc.coordinator",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                str(self.root),
                "--config",
                str(config),
                *serve_tls,
                *(["--http-listen", http] if http else []),
            ],
        )
        for _ in range(300):
            self.procs.check()
            if port_file.exists() and port_file.read_text().strip():
                break
            await asyncio.sleep(0.1)
        else:
            raise ClusterError(
                "the coordinator did not start within 30 s (see logs/coordinator.log)"
            )
        bound = port_file.read_text().strip()  # "host:port" of the bound socket
        self.address = bound if ":" in bound else f"127.0.0.1:{bound}"
        self.say(f"coordinator on {self.address}")
        if http:
            for _ in range(100):
                if http_file.exists() and http_file.read_text().strip():
                    break
                self.procs.check()
                await asyncio.sleep(0.1)
            else:
                raise ClusterError(
                    "the dashboard did not start within 10 s (see logs/coordinator.log)"
                )
            self.display.dashboard = http_file.read_text().strip()
            self.say(f"dashboard on {self.display.dashboard}")

    async def _publish_first_model(self) -> None:
        c = self.cfg
        first = self.root / "initial" / f"kg-b{c.blocks}c{c.channels}-s0-d0.onnx"
        first.parent.mkdir(exist_ok=True)
        await self.procs.run_once(
            "init",
            [
                "-m",
                "trainer",
                "init",
                "--board-size",
                str(c.board_size),
                "--blocks",
                str(c.blocks),
                "--channels",
                str(c.channels),
                "--out",
                str(first),
            ],
        )
        await self.procs.run_once(
            "publish-initial",
            ["-m", "trainer", "publish", str(first), "--coordinator", self.address],
            env=self._trainer_env(),
        )
        self.say(f"published the random first model {first.stem} (released without gating)")

    # Tokens and TLS files reach the daemons in their environment (docs/operations.md,
    # "Tokens from the environment"): a token on a command line shows in `ps`.
    def _ca(self, *settings: str) -> dict[str, str]:
        """``settings`` (variable names) set to the CA, with --tls."""
        return {} if self.tls is None else dict.fromkeys(settings, str(self.tls.ca))

    def _trainer_env(self) -> dict[str, str]:
        from trainer.config import SETTINGS

        return {
            SETTINGS.env_var("token"): self.trainer_token,
            **self._ca(SETTINGS.env_var("tls_ca")),
        }

    def _worker_env(self) -> dict[str, str]:
        from kgrpc.worker.config import SETTINGS

        return {
            SETTINGS.env_var("token"): self.worker_token,
            **self._ca(SETTINGS.env_var("tls_ca"), SETTINGS.env_var("inference_tls_ca")),
        }

    def _inference_env(self) -> dict[str, str]:
        from inference.config import SETTINGS

        env = {
            SETTINGS.env_var("token"): self.worker_token,
            **self._ca(SETTINGS.env_var("coordinator_tls_ca")),
        }
        if self.tls is not None:
            env[SETTINGS.env_var("tls_cert")] = str(self.tls.cert)
            env[SETTINGS.env_var("tls_key")] = str(self.tls.key)
        return env

    async def _make_certificates(self) -> None:
        from kgrpc.net.certs import CertificateError, make_ca_and_server_cert

        try:
            self.tls = await asyncio.to_thread(
                make_ca_and_server_cert, self.root / "tls", ("127.0.0.1", "localhost")
            )
        except CertificateError as exc:
            raise ClusterError(f"--tls: {exc}") from None
        self.say(f"TLS everywhere: private CA {self.tls.ca}")

    async def setup(self) -> None:
        c = self.cfg
        self.logs.mkdir(parents=True, exist_ok=True)
        self.say(f"data dir {self.root}")
        for line in c.describe():
            self.say(line)
        if c.time_bounded:
            self.say(f"training for {c.max_minutes:g} minutes, then the final evaluation")
        if c.tls:
            await self._make_certificates()
        self.worker_token = await self._create_token("worker", "cluster-workers")
        self.trainer_token = await self._create_token("trainer", "cluster-trainer")
        await self._start_coordinator()
        await self._publish_first_model()

        if c.worker_inference == "server":
            inference_addr = f"127.0.0.1:{free_port()}"
            await self.procs.spawn(
                "inference",
                [
                    "-m",
                    "inference",
                    "--listen",
                    inference_addr,
                    "--coordinator",
                    self.address,
                    "--model-dir",
                    str(self.root / "inference-models"),
                    "--intra-threads",
                    str(ENGINE_THREADS),
                    "--max-batch",
                    str(max(8, c.workers * c.parallel_games)),
                    "--log-every-s",
                    "30",
                ],
                env=self._inference_env(),
            )
            self.say(f"inference server on {inference_addr}")
            inference = ["--inference", inference_addr]
        else:  # each worker runs the net itself
            inference = local_inference_args(c.parallel_games)
        for i in range(c.workers + c.spare_workers):
            spare = i >= c.workers
            await self.procs.spawn(
                f"worker-{i + 1}",
                [
                    "-m",
                    "kgrpc.worker",
                    "--coordinator",
                    self.address,
                    *inference,
                    "--parallel-games",
                    str(c.parallel_games),
                    "--username",
                    f"demo-{i + 1}",
                    "--work-dir",
                    str(self.root / f"worker-{i + 1}"),
                    "--seed",
                    str(1000 + i),
                    "--quiet",
                    *(["--nice", str(SPARE_WORKER_NICE), "--idle"] if spare else []),
                ],
                env=self._worker_env(),
            )
        spares = ""
        if c.spare_workers:
            spares = f" and {c.spare_workers} spare at SCHED_IDLE, nice {SPARE_WORKER_NICE}"
        self.say(f"{c.workers} workers{spares} started")
        await self.procs.spawn(
            "trainer",
            [
                "-m",
                "trainer",
                "run",
                "--coordinator",
                self.address,
                "--data-dir",
                str(self.root),
                "--work-dir",
                str(self.root / "trainer"),
                *trainer_flags(c.trainer_settings()),
            ],
            expected_exit=True,
            env=self._trainer_env(),
        )
        self.say("trainer started")
        if c.ladder_games > 0:
            await self._start_ladder()

    async def _start_ladder(self) -> None:
        from kgrpc.programs.eval.remote import follow_args

        c = self.cfg
        refs = self.ladder_references(say=True)
        await self.procs.spawn(
            "ladder",
            follow_args(
                self.address,
                c.ladder_games,
                c.board_size,
                c.komi,
                c.ladder_search_visits,
                self.root / "ladder",
                refs,
                c.ladder_every_minutes,
                c.ladder_nice,
            ),
            env=self._trainer_env(),
        )
        every = (
            f"a release every {c.ladder_every_minutes:g} minutes"
            if c.ladder_every_minutes > 0
            else "every release"
        )
        self.say(
            f"rating ladder started: {every} against {', '.join(refs)}, {c.ladder_games} "
            f"games each at {c.ladder_search_visits} visits, nice {c.ladder_nice}"
        )

    def ladder_references(self, say: bool = False) -> list[str]:
        """--ladder-references that can be played here (``say``: what was changed)."""
        from kgrpc.programs.eval.remote import playable_references

        refs, notes = playable_references(self.cfg.ladder_reference_list())
        for note in notes if say else []:
            self.say(note)
        return refs

    # ----------------------------------------------------------------- watching
    async def watch(self, stop: asyncio.Event) -> None:
        """Until the trainer is done and no gating match is pending (or stop / timeout);
        with ``--generations 0``, until ``--max-minutes`` have passed."""
        from kgrpc.net import make_channel

        deadline = self.started + self.cfg.max_minutes * 60
        trainer = self.procs.child("trainer")
        assert trainer is not None
        tls_ca = None if self.tls is None else self.tls.ca
        async with make_channel(self.address, token=self.worker_token, tls_ca=tls_ca) as channel:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            while not stop.is_set():
                self.procs.check()
                with contextlib.suppress(Exception):
                    self.snapshot.record(
                        await stub.GetStats(coordinator_pb2.GetStatsRequest(), timeout=10)
                    )
                self.display.show(self.snapshot, self.address, trainer.log)
                s = self.snapshot.stats
                if trainer.proc.returncode == 0 and s is not None and self._loop_done(s):
                    return
                if time.monotonic() > deadline:
                    if self.cfg.time_bounded:
                        self.say(f"{self.cfg.max_minutes:g} minutes of training done")
                        return
                    raise ClusterError(
                        f"not finished after {self.cfg.max_minutes} minutes "
                        "(raise --max-minutes, or see the logs)"
                    )
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
        # A ladder that rates every release is waited for; one on a budget may skip the last.
        if self.cfg.ladder_games > 0 and not self.cfg.ladder_every_minutes and newest is not None:
            from kgrpc.programs.eval.remote import follow_done

            refs = self.ladder_references()
            if not follow_done(s, newest.name, refs):  # the ladder has not rated it yet
                return False
        now_ms = time.time() * 1000
        live = [w for w in s.workers if now_ms - w.last_heartbeat_unix_ms < 60_000]
        return (
            newest is not None
            and len(live) >= self.cfg.workers
            and all(w.stats.current_model == newest.name for w in live)
        )

    # ----------------------------------------------------------------- the whole run
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        interrupts = 0

        def on_signal() -> None:
            nonlocal interrupts
            interrupts += 1
            stop.set()
            if interrupts > 1:  # a second Ctrl-C: no more waiting
                self.procs.kill_all()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        try:
            await self.setup()
            await self.watch(stop)
            if stop.is_set():
                self.say("interrupted: stopping every process")
                await self.procs.stop_all()
                return 130
            stats = self.snapshot.stats
            self.say(
                ("time is up" if self.cfg.time_bounded else "generations done")
                + ": stopping workers, inference server, coordinator"
            )
            await self.procs.stop_all()
            evaluation = (
                {}
                if stats is None
                else await evaluate_newest(stats, self.root / "models", self.cfg, self.say)
            )
            final = await self._final_ladder(stats)
            text = (
                ""
                if stats is None
                else summary_text(
                    stats,
                    evaluation,
                    self.root,
                    self.logs,
                    time.monotonic() - self.started,
                    ladder=self.cfg.ladder_games > 0,
                    final=final,
                )
            )
            print(text, flush=True)
            write_summary_json(self.root, self.cfg, stats, evaluation, final)
            return 0
        except ClusterError as exc:
            print(f"kgrpc-cluster: {exc}", file=sys.stderr, flush=True)
            await self.procs.stop_all()
            return 1
        finally:
            if self.procs.any_running():
                await self.procs.stop_all()

    async def _final_ladder(self, stats: coordinator_pb2.Stats | None) -> FinalLadder | None:
        newest = None if stats is None else latest_release(stats)
        if self.cfg.final_ladder_games <= 0 or newest is None:
            return None
        if newest.training_steps == 0:
            self.say(f"no trained model was released: the final ladder rates {newest.name}")
        run_start = time.time() - (time.monotonic() - self.started)
        facts = model_facts(newest.created_unix_ms / 1000, stats.games_accepted, run_start)
        return await run_final_ladder(self.procs, newest.name, self.root, self.cfg, self.say, facts)


def local_inference_args(parallel_games: int) -> list[str]:
    """A worker's flags to run the net in its own process, on ENGINE_THREADS threads.

    The worker's native game set sends the leaves of all its games as one request a step
    (about 155 positions on average in learn9 runs at 32 games), and the engine runs a request
    larger than --max-batch whole: the net batch is the game set's, not this flag's. A cap
    near the games' count makes the batcher run each such request at once instead of
    waiting --max-delay-ms for more that will not come (docs/training.md, "The worker's net
    batch in the loop")."""
    return [
        "--inference",
        "local",
        "--max-batch",
        str(max(8, parallel_games)),
        "--intra-threads",
        str(ENGINE_THREADS),
    ]


def toml_value(value: object) -> str:
    """A setting as a TOML value; text (a --coord value) stays a TOML string, which the
    coordinator's settings loader parses by the setting's type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def trainer_flags(settings: dict[str, object]) -> list[str]:
    """``--name value`` for each trainer setting (kgrpc-train run parses text by type)."""
    from kgrpc.programs.cluster.profiles import setting_text

    out: list[str] = []
    for key, value in settings.items():
        out += [f"--{key.replace('_', '-')}", setting_text(value)]
    return out


def latest_release(stats: coordinator_pb2.Stats) -> common_pb2.ModelInfo | None:
    released = [m for m in stats.models if m.status == common_pb2.MODEL_STATUS_RELEASED]
    return max(released, key=lambda m: (m.released_unix_ms, m.training_steps), default=None)
