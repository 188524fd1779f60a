"""Coordinator replicas run as subprocesses for a benchmark, and what they cost.

A backend is where the replicas keep their state: ``sqlite`` (SQLite and the blobs in one
data directory, the default of a coordinator), ``pg-s3`` (a PostgreSQL index and an S3
store, one replica) and ``pg-s3-x2`` (the same with two replicas, each with a data
directory, so an ingest journal, of its own). :func:`open_backends` starts the engines the
backends ask for (kgrpc.programs.bench.engines) and leaves out, with a note, those whose
engine is not installed. :class:`Replicas` starts ``python -m kgrpc.coordinator serve`` per
replica, and reads their CPU time and memory (with their validation processes) through
psutil, and the engines' (the postmaster with its backends, ``weed mini``) apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgrpc.programs.bench import engines

# name -> (replicas, shared engines); the order is the order of the rows.
BACKENDS: dict[str, tuple[int, bool]] = {
    "sqlite": (1, False),
    "pg-s3": (1, True),
    "pg-s3-x2": (2, True),
}


@dataclass
class Backend:
    name: str
    replicas: int
    index: str = ""  # "" = SQLite in the first replica's data directory
    store: str = ""  # "" = the data directory
    env: dict[str, str] = field(default_factory=dict)  # the S3 server's AWS_* variables
    engine_pids: list[int] = field(default_factory=list)


class Engines:
    """The PostgreSQL and S3 servers shared by the backends of one run (started once)."""

    def __init__(self) -> None:
        self.pg: engines.PostgresServer | None = None
        self.s3: engines.SeaweedServer | None = None

    def backend(self, name: str) -> Backend:
        replicas, shared = BACKENDS[name]
        if not shared:
            return Backend(name, replicas)
        if self.pg is None:
            bin_dir = engines.find_bin_dir()
            assert bin_dir is not None  # open_backends checked engines.missing first
            self.pg = engines.PostgresServer(bin_dir)
        if self.s3 is None:
            weed = engines.find_weed()
            assert weed is not None
            self.s3 = engines.SeaweedServer(weed)
        pids = [p for p in (self.pg.pid(), self.s3.pid()) if p]
        return Backend(
            name, replicas, self.pg.new_database(), self.s3.new_url(), self.s3.env(), pids
        )

    def close(self) -> None:
        for server in (self.pg, self.s3):
            if server is not None:
                server.close()


def parse_backends(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise SystemExit(
            f"unknown backend(s) {', '.join(unknown) or '(none)'}: choose from "
            + ", ".join(BACKENDS)
        )
    return names


@contextlib.contextmanager
def open_backends(names: Iterable[str]) -> Iterator[tuple[list[Backend], dict[str, str]]]:
    """The backends named, engines started; and {name: why it is skipped} for the others."""
    names = list(names)
    skipped: dict[str, str] = {}
    shared = [n for n in names if BACKENDS[n][1]]
    if shared:
        why = "; ".join(w for w in (engines.missing("postgresql"), engines.missing("s3")) if w)
        if why:
            skipped = {n: why for n in shared}
    run = Engines()
    try:
        yield [run.backend(n) for n in names if n not in skipped], skipped
    finally:
        run.close()


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU time of these processes and their children, now (0 for those gone)."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            p = psutil.Process(pid)
            for q in [p, *p.children(recursive=True)]:
                t = q.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def count_processes(pids: Iterable[int]) -> int:
    """How many processes ``cpu_seconds`` reads for these pids now (themselves and children)."""
    import psutil

    n = 0
    for pid in pids:
        try:
            n += 1 + len(psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            continue
    return n


def rss_bytes(pids: Iterable[int]) -> tuple[int, int]:
    """(RSS of the processes themselves, RSS with their children), now."""
    import psutil

    own = total = 0
    for pid in pids:
        try:
            p = psutil.Process(pid)
            rss = p.memory_info().rss
            own += rss
            total += rss + sum(c.memory_info().rss for c in p.children(recursive=True))
        except psutil.Error:
            continue
    return own, total


class Replicas:
    """``backend.replicas`` coordinators on the backend's index and store, as subprocesses.

    :meth:`prepare` writes what must be there before they start (tokens, tasks) into the
    index; :meth:`start` runs them and returns their addresses."""

    def __init__(self, root: Path, backend: Backend, args: list[str], env: dict[str, str]):
        self.root = root
        self.backend = backend
        self.args = args
        self.env = {**env, **backend.env}
        self.dirs = [root / f"replica{i}" for i in range(backend.replicas)]
        self.procs: list[subprocess.Popen[bytes]] = []

    def connect(self) -> Any:
        from kgrpc.coordinator import db

        return db.connect(self.dirs[0], index=self.backend.index)

    def create_tokens(self) -> tuple[str, str]:
        from kgrpc.coordinator.testing import create_tokens

        return create_tokens(self.dirs[0], self.backend.index)

    def store_tasks(self, terms: Iterable[Any]) -> None:
        from kgrpc.coordinator.config import config_from
        from kgrpc.coordinator.tasks import Tasks

        conn = self.connect()
        try:
            cfg = config_from(None, {"data_dir": str(self.dirs[0]), "index": self.backend.index})
            tasks = Tasks(conn, cfg)
            for t in terms:
                tasks.store(t, "selfplay" if len(t.models) == 1 else "match")
        finally:
            conn.close()

    async def start(self, timeout_s: float = 120.0) -> list[str]:
        for d in self.dirs:
            cmd = [sys.executable, "-m", "kgrpc.coordinator", "serve", "--listen", "127.0.0.1:0"]
            cmd += ["--data-dir", str(d), *self.args]
            if self.backend.index:
                cmd += ["--index", self.backend.index]
            if self.backend.store:
                cmd += ["--store", self.backend.store]
            d.mkdir(parents=True, exist_ok=True)
            with open(d / "coordinator.log", "ab") as log:
                self.procs.append(
                    subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT)
                )
        addresses = []
        deadline = time.monotonic() + timeout_s
        for d, proc in zip(self.dirs, self.procs, strict=True):
            port_file = d / "coordinator.port"
            while not port_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"coordinator did not start: {self.log_tail(d)}")
                await asyncio.sleep(0.05)
            addresses.append(port_file.read_text().strip())
        return addresses

    @staticmethod
    def log_tail(d: Path) -> str:
        try:
            return (d / "coordinator.log").read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


def coordinator_env(native: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    if native:
        env.pop("KGRPC_NATIVE", None)
    else:
        env["KGRPC_NATIVE"] = "0"
    return env
