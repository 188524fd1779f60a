"""The GTP protocol on stdin/stdout: lines in, one answer per command out, flushed at once.

A command is answered ``=id result`` or ``?id error`` and a blank line. An analysis
(:class:`~kgrpc.programs.gtp.analysis.Analysis`) answers ``=`` at once, streams its lines and
ends, with the blank line, when the next command (or an empty line) arrives; a
``*genmove_analyze`` streams until its move is chosen and ends with ``play MOVE``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import TextIO

from kgrpc.evaluator import EvaluationError
from kgrpc.programs.gtp.analysis import Analysis, GenmoveAnalysis
from kgrpc.programs.gtp.engine import GtpEngine, GtpError


def _clean(line: str) -> str:
    line = line.split("#", 1)[0]
    out = []
    for ch in line:
        if ch == "\t":
            out.append(" ")
        elif ord(ch) >= 32 and ord(ch) != 127:
            out.append(ch)
    return "".join(out).strip()


def start_line_reader(
    fd: int, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]
) -> threading.Thread:
    """A daemon thread that puts each line read from ``fd`` on ``queue`` (None at the end).

    Raw ``os.read`` (no Python file object, so no buffer lock held at interpreter exit) works
    for pipes, terminals and regular files alike.
    """

    def put(item: str | None) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
            return True
        except RuntimeError:  # the loop is closed: the engine has quit
            return False

    def read() -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                if pending:
                    put(pending.decode("utf-8", errors="replace"))
                put(None)
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not put(line.decode("utf-8", errors="replace")):
                    return

    thread = threading.Thread(target=read, name="gtp-stdin", daemon=True)
    thread.start()
    return thread


async def serve(engine: GtpEngine, lines: asyncio.Queue[str | None], out: TextIO) -> None:
    """Answer commands from ``lines`` until ``quit`` or the end of input."""

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    queued: list[str | None] = []
    while not engine.done:
        raw = queued.pop() if queued else await lines.get()
        if raw is None:
            return
        line = _clean(raw)
        if not line:
            continue
        words = line.split()
        ident = ""
        if words[0].isdigit():
            ident = words.pop(0)
            if not words:
                continue
        command, args = words[0].lower(), words[1:]
        try:
            result = await engine.handle(command, args)
        except GtpError as exc:
            write(f"?{ident} {exc}\n\n")
            continue
        except EvaluationError as exc:  # the inference servers failed or refused
            from kgrpc.net import describe  # what to do when they disagree with us about TLS

            print(f"kgrpc-gtp: {command}: inference failed: {describe(exc)}", file=sys.stderr)
            write(f"?{ident} inference failed: {describe(exc)}\n\n")
            continue
        except Exception as exc:  # keep the session alive for the controller
            print(f"kgrpc-gtp: internal error on {line!r}: {exc!r}", file=sys.stderr)
            write(f"?{ident} internal error: {exc}\n\n")
            continue
        if isinstance(result, GenmoveAnalysis):
            # Streams while its move is searched, then ends with `play MOVE`; not cut short
            # by the next command (KataGo's and Leela Zero's *genmove_analyze).
            write(f"={ident}\n")
            try:
                final = await result.run(lambda text: write(text + "\n"))
            except Exception as exc:
                print(f"kgrpc-gtp: {command} failed: {exc!r}", file=sys.stderr)
                final = ""
            write(f"{final}\n\n" if final else "\n")
            continue
        if isinstance(result, Analysis):
            write(f"={ident}\n")
            task = asyncio.create_task(result.run(lambda text: write(text + "\n")))
            nxt = await lines.get()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:
                print(f"kgrpc-gtp: analysis stopped: {exc!r}", file=sys.stderr)
            write("\n")
            # An empty line only ends the analysis; anything else is the next command.
            if nxt is None or _clean(nxt):
                queued.append(nxt)
            continue
        write(f"={ident} {result}".rstrip(" ") + "\n\n")
