"""The child processes of a cluster run: start them, run one-shot commands, notice a process
that died, stop them in order. Every child writes ``logs/NAME.log``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

# Stop order: the ladder and workers first (they flush their spool), then trainer, inference,
# coordinator last.
STOP_ORDER = ("ladder", "worker", "trainer", "inference", "coordinator")


class ClusterError(RuntimeError):
    pass


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


class Supervisor:
    """Python child processes run in ``cwd``, logging to ``logs``."""

    def __init__(self, cwd: Path, logs: Path, python: str = sys.executable) -> None:
        self.cwd = cwd
        self.logs = logs
        self.python = python
        self.children: list[Child] = []

    def child(self, name: str) -> Child | None:
        return next((c for c in self.children if c.name == name), None)

    def _env(self, threads: int = 1, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(extra or {})
        # Five busy processes share the machine: one compute thread each keeps them from
        # oversubscribing the cores (ONNX Runtime and torch default to all cores).
        env.update(
            PYTHONUNBUFFERED="1",
            GRPC_VERBOSITY="ERROR",
            OMP_NUM_THREADS=str(threads),
            MKL_NUM_THREADS=str(threads),
        )
        return env

    async def spawn(
        self,
        name: str,
        args: list[str],
        *,
        expected_exit: bool = False,
        threads: int = 1,
        env: dict[str, str] | None = None,
    ) -> Child:
        """Start ``python ARGS``; ``env``: variables added to this process's environment
        (tokens go there, not on command lines other users can read)."""
        log = self.logs / f"{name}.log"
        fh = open(log, "ab")  # noqa: SIM115 - the child owns it until it exits
        proc = await asyncio.create_subprocess_exec(
            self.python,
            *args,
            stdout=fh,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            env=self._env(threads, env),
            cwd=self.cwd,
            start_new_session=True,  # Ctrl-C reaches us only; we stop children in order
        )
        fh.close()
        child = Child(name, proc, log, expected_exit)
        self.children.append(child)
        return child

    async def run_once(self, name: str, args: list[str], env: dict[str, str] | None = None) -> str:
        """Run a command to its end; its output goes to ``logs/NAME.log``; returns stdout."""
        proc = await asyncio.create_subprocess_exec(
            self.python,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env(extra=env),
            cwd=self.cwd,
        )
        out, err = await proc.communicate()
        (self.logs / f"{name}.log").write_bytes(out + err)
        if proc.returncode != 0:
            raise ClusterError(f"{name} failed (exit {proc.returncode}): {err.decode()[-800:]}")
        return out.decode()

    def check(self) -> None:
        """Raise :class:`ClusterError` (with the end of its log) if a child died unexpectedly."""
        for c in self.children:
            rc = c.proc.returncode
            if rc is not None and not (c.expected_exit and rc == 0):
                tail = c.log.read_text(errors="replace")[-1500:] if c.log.exists() else ""
                raise ClusterError(
                    f"{c.name} exited with code {rc}; last lines of {c.log}:\n{tail}"
                )

    def any_running(self) -> bool:
        return any(c.proc.returncode is None for c in self.children)

    def kill_all(self) -> None:
        """SIGKILL every child at once (a second Ctrl-C: no more waiting)."""
        for c in self.children:
            with contextlib.suppress(ProcessLookupError):
                c.proc.kill()

    async def stop_all(self, grace_s: float = 15.0) -> None:
        """SIGTERM each running child in :data:`STOP_ORDER`, SIGKILL after ``grace_s``."""
        order = sorted(self.children, key=lambda c: STOP_ORDER.index(c.name.split("-")[0]))
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
