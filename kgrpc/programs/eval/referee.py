"""Who decides which stones are dead when a game between two engines ends.

- ``gnugo``: GNU Go (``gnugo --mode gtp --chinese-rules``), given the final stones, answers
  ``final_status_list dead`` and ``final_status_list seki``. One process serves a whole
  match, one game at a time.
- ``playouts``: :func:`kgrpc.programs.eval.scoring.stone_status` (pass-alive chains, seki, random
  playouts), in a thread.

The count is always ours: :meth:`Board.score` with the dead stones removed, under the match's
rules. ``auto`` (the default) is GNU Go when it is installed, else playouts; if GNU Go fails
on a position (crash, timeout, an answer that names no stone) that game is judged by the
playouts and the judgement says so.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from typing import Protocol

from kgrpc.go.board import Board
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.programs.eval import scoring
from kgrpc.programs.eval.engine import EngineError, GtpProcess

REFEREES = ("auto", "gnugo", "playouts")


def find_gnugo() -> str | None:
    """Path of the GNU Go binary (Debian installs it in /usr/games), or None."""
    return shutil.which("gnugo") or shutil.which("/usr/games/gnugo")


@dataclass(frozen=True)
class Judgement:
    score: float  # black minus white minus komi, dead stones removed
    dead: tuple[int, ...]
    seki: tuple[int, ...]
    referee: str
    note: str = ""


class Referee(Protocol):
    name: str

    async def judge(self, board: Board) -> Judgement: ...

    async def close(self) -> None: ...


class PlayoutReferee:
    name = "playouts"

    async def judge(self, board: Board) -> Judgement:
        status = await asyncio.to_thread(scoring.stone_status, board.copy())
        return Judgement(board.score(status.dead), status.dead, status.seki, self.name)

    async def close(self) -> None:
        return None


class GnuGoReferee:
    name = "gnugo"

    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.path = path
        self.timeout = timeout
        self._engine: GtpProcess | None = None
        self._lock = asyncio.Lock()
        self._fallback = PlayoutReferee()

    async def judge(self, board: Board) -> Judgement:
        async with self._lock:
            try:
                dead, seki = await self._ask(board)
            except (EngineError, ValueError) as exc:
                if self._engine is not None:
                    await self._engine.kill()
                    self._engine = None
                judged = await self._fallback.judge(board)
                return Judgement(
                    judged.score,
                    judged.dead,
                    judged.seki,
                    judged.referee,
                    f"GNU Go failed ({exc}); judged by playouts",
                )
        return Judgement(board.score(dead), dead, seki, self.name)

    async def _ask(self, board: Board) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if self._engine is None:
            self._engine = GtpProcess(
                [self.path, "--mode", "gtp", "--chinese-rules"], "gnugo-referee"
            )
        send = self._engine.send
        n = board.size
        await send(f"boardsize {n}", self.timeout)
        await send("clear_board", self.timeout)
        await send(f"komi {board.komi:g}", self.timeout)
        stones = board.stones
        # The final stones of a legal position: placing them in any order captures nothing.
        for p in map(int, stones.nonzero()[0]):
            await send(f"play {'black' if stones[p] > 0 else 'white'} {to_gtp(p, n)}", self.timeout)
        lists = []
        for status in ("dead", "seki"):
            answer = await send(f"final_status_list {status}", self.timeout)
            points = tuple(sorted(from_gtp(v, n) for v in answer.split()))
            if any(stones[p] == 0 for p in points):
                raise ValueError(f"GNU Go listed an empty point as {status}")
            lists.append(points)
        return lists[0], lists[1]

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.close()
            self._engine = None


def make_referee(kind: str) -> Referee:
    """``auto``, ``gnugo`` (ValueError when GNU Go is not installed) or ``playouts``."""
    if kind not in REFEREES:
        raise ValueError(f"unknown referee {kind!r}; choose one of {', '.join(REFEREES)}")
    path = find_gnugo() if kind in ("auto", "gnugo") else None
    if path is not None:
        return GnuGoReferee(path)
    if kind == "gnugo":
        raise ValueError("referee gnugo: GNU Go is not installed (apt-get install gnugo)")
    return PlayoutReferee()
