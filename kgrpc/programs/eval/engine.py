"""A GTP engine run as an asyncio subprocess: commands with timeouts, errors as exceptions.

Every way an engine can misbehave ends in a :class:`EngineError` subclass with a message that
says what happened, never in a hang: :class:`EngineFailure` for a ``?`` answer,
:class:`EngineTimeout` when no answer came in time, :class:`EngineDied` when the process
exited or closed its output (with its exit code and the end of its stderr). The process is
killed on timeout and when closed; stderr is drained continuously (its last lines are kept
for error messages) so a chatty engine cannot block on a full pipe.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shlex
import sys
from collections.abc import Sequence

STDERR_LINES = 20


class EngineError(RuntimeError):
    """The engine did not answer a command as GTP requires."""


class EngineFailure(EngineError):
    """The engine answered ``? message``."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(f"answered '? {message}' to {command!r}")
        self.command = command
        self.message = message


class EngineTimeout(EngineError):
    pass


class EngineDied(EngineError):
    pass


def gtp_command(*args: str) -> list[str]:
    """The built-in engine (``kgrpc-gtp``) run by this interpreter, with ``args``."""
    from kgrpc.programs import gtp

    return [sys.executable, "-m", gtp.__name__, *args]


def split_command(command: str | Sequence[str]) -> list[str]:
    """A command line as given on the command line (shell words) or already split."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("empty engine command")
    return argv


class GtpProcess:
    def __init__(self, command: str | Sequence[str], label: str = "") -> None:
        self.argv = split_command(command)
        self.label = label or os.path.basename(self.argv[0])
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise EngineDied(f"cannot start {shlex.join(self.argv)}: {exc}") from exc
        self._drain = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                return
            self.stderr_tail.append(line.decode("utf-8", errors="replace").rstrip())

    async def _died(self, during: str) -> EngineDied:
        assert self.proc is not None
        code = None
        with contextlib.suppress(TimeoutError):
            code = await asyncio.wait_for(self.proc.wait(), 2.0)
        if self._drain is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._drain), 1.0)
        tail = " | ".join(list(self.stderr_tail)[-3:])
        how = f"exited with code {code}" if code is not None else "closed its output"
        return EngineDied(f"{how} during {during!r}" + (f"; stderr: {tail}" if tail else ""))

    async def send(self, command: str, timeout: float | None = None) -> str:
        """Send one command; its answer's text (``=`` and id stripped), or an EngineError."""
        if self.proc is None:
            await self.start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write((command + "\n").encode())
            await self.proc.stdin.drain()
        except (ConnectionError, OSError):
            raise await self._died(command) from None
        try:
            lines = await asyncio.wait_for(self._read_answer(command), timeout)
        except TimeoutError:
            await self.kill()
            raise EngineTimeout(f"no answer to {command!r} within {timeout:g} s") from None
        first = lines[0]  # commands go out without ids, so the answer has none either
        text = "\n".join([first[1:], *lines[1:]]).strip()
        if first.startswith("?"):
            raise EngineFailure(command, text)
        return text

    async def _read_answer(self, command: str) -> list[str]:
        assert self.proc is not None and self.proc.stdout is not None
        lines: list[str] = []
        while True:
            raw = await self.proc.stdout.readline()
            if not raw:
                raise await self._died(command)
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if not lines:
                if not line.strip():
                    continue  # blank lines before an answer are not part of it
                if line[0] not in "=?":
                    raise EngineError(f"answered {line[:80]!r} to {command!r}: not GTP")
            elif not line.strip():
                return lines
            lines.append(line)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        await self._stop_drain()

    async def _stop_drain(self) -> None:
        if self._drain is not None:
            if not self._drain.done():
                self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._drain
            self._drain = None

    async def close(self, timeout: float = 5.0) -> None:
        """``quit``, then wait for the exit; killed if it does not go within ``timeout``."""
        if self.proc is None:
            return
        if self.proc.returncode is None:
            with contextlib.suppress(EngineError):
                await self.send("quit", timeout)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), timeout)
        await self.kill()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
