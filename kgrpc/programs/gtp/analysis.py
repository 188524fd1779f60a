"""Live analysis: ``kata-analyze`` / ``lz-analyze`` (streamed until the next command) and
``kata-genmove_analyze`` / ``lz-genmove_analyze`` / ``genmove_analyze`` (streamed while the
move is searched, then ``play MOVE``).

Arguments, as KataGo and Leela Zero read them: ``[colour] [interval] KEY VALUE ...``.
Every key that Lizzie, Sabaki and KaTrain send is understood:

* answered: ``interval``, ``minmoves``, ``maxmoves``, ``ownership`` (kata-), ``rootInfo``
  (kata-: the root's own figures), ``pvVisits`` and ``pvEdgeVisits`` (kata-: the visits of each
  move of the PV; one tree without transpositions makes the two the same);
* ``avoid COLOUR VERTICES DEPTH`` / ``allow ...`` (three values each): the moves listed at the
  root are filtered (the search itself is not restricted);
* accepted and ignored, since kgrpc has no such figure: ``ownershipStdev``, ``movesOwnership``
  (and ``ownership`` for ``lz-analyze``, whose output has no ownership field).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.programs.gtp.players import SEARCH_STEP, SearchPlayer

# Longest principal variation printed by the analysis commands.
PV_LENGTH = 15
Z95 = 1.96
# Keys that take true/false: answered (kata-) or accepted and ignored (see the docstring).
FLAG_KEYS = (
    "ownership",
    "rootInfo",
    "pvVisits",
    "pvEdgeVisits",
    "ownershipStdev",
    "movesOwnership",
)
NUMBER_KEYS = ("interval", "minmoves", "maxmoves")
MOVE_LIST_KEYS = ("avoid", "allow")


class AnalyzeError(ValueError):
    """Bad analysis arguments (the GTP error text)."""


def parse_colour(text: str) -> int:
    t = text.strip().lower()
    if t in ("b", "black"):
        return BLACK
    if t in ("w", "white"):
        return WHITE
    raise AnalyzeError("invalid color")


@dataclass(frozen=True)
class AnalyzeRequest:
    colour: int
    interval: float  # seconds between info lines; 0 = none
    kata: bool  # kata-analyze fields (floats, score, ownership) or lz-analyze (0..10000)
    ownership: bool = False
    max_moves: int = 0  # 0 = every move with visits
    min_moves: int = 0
    root_info: bool = False
    pv_visits: bool = False
    pv_edge_visits: bool = False
    # Root moves of the analysed colour not to list (avoid), or the only ones to list (allow).
    avoid: frozenset[int] = field(default_factory=frozenset)
    allow: frozenset[int] | None = None


def parse_analyze_args(args: list[str], to_play: int, kata: bool, size: int) -> AnalyzeRequest:
    """``[colour] [interval] key value ...`` as KataGo and Leela Zero read them."""
    colour, interval = to_play, 0.0
    rest = list(args)
    if rest and rest[0].lower() in ("b", "w", "black", "white"):
        colour = parse_colour(rest.pop(0))
    if rest and _is_number(rest[0]):
        interval = float(rest.pop(0)) / 100.0
    flags: dict[str, bool] = {}
    numbers = {"minmoves": 0, "maxmoves": 0}
    avoid: set[int] = set()
    allow: set[int] | None = None
    while rest:
        key = rest.pop(0)
        if key in MOVE_LIST_KEYS:
            if len(rest) < 3:
                raise AnalyzeError(f"{key} takes a colour, vertices and a depth")
            who, points, depth = parse_colour(rest[0]), rest[1], rest[2]
            del rest[:3]
            if not depth.isdigit():
                raise AnalyzeError(f"{key}: the depth must be a non-negative integer")
            moves = _vertices(points, size, key)
            if who != colour:
                continue  # moves of the other colour: never at the analysed root
            if key == "avoid":
                avoid |= moves
            else:
                allow = moves if allow is None else allow | moves
            continue
        if not rest:
            raise AnalyzeError(f"{key!r} has no value")
        value = rest.pop(0)
        if key == "interval":
            if not _is_number(value):
                raise AnalyzeError(f"interval must be a number of centiseconds, got {value!r}")
            interval = float(value) / 100.0
        elif key in numbers:
            if not value.isdigit():
                raise AnalyzeError(f"{key} must be a non-negative integer, got {value!r}")
            numbers[key] = int(value)
        elif key in FLAG_KEYS:
            if value not in ("true", "false"):
                raise AnalyzeError(f"{key} must be true or false, got {value!r}")
            flags[key] = value == "true"
        else:
            known = ", ".join((*NUMBER_KEYS, *FLAG_KEYS, *MOVE_LIST_KEYS))
            raise AnalyzeError(f"unknown analysis key {key!r} (known: {known})")
    if not 0 <= interval < 1e6:
        raise AnalyzeError("interval out of range")
    return AnalyzeRequest(
        colour,
        interval,
        kata,
        ownership=kata and flags.get("ownership", False),
        max_moves=numbers["maxmoves"],
        min_moves=numbers["minmoves"],
        root_info=kata and flags.get("rootInfo", False),
        pv_visits=kata and flags.get("pvVisits", False),
        pv_edge_visits=kata and flags.get("pvEdgeVisits", False),
        avoid=frozenset(avoid),
        allow=None if allow is None else frozenset(allow),
    )


def _vertices(text: str, size: int, key: str) -> set[int]:
    out = set()
    for v in text.split(","):
        try:
            out.add(from_gtp(v.strip(), size))
        except ValueError:
            raise AnalyzeError(f"{key}: {v!r} is not a vertex") from None
    return out


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _pv(node, first: int, size: int) -> tuple[list[str], list[int]]:
    """The principal variation after ``first`` at ``node`` (most visited child each step) and
    the visits of each of its moves."""
    out = [to_gtp(first, size)]
    visits = [int(node.child_n[first])]
    child = node.children.get(first)
    while child is not None and child.expanded and not child.terminal and len(out) < PV_LENGTH:
        n = child.child_n
        if n is None or float(n.max()) < 1:
            break
        move = int(np.argmax(n))
        out.append(to_gtp(move, size))
        visits.append(int(n[move]))
        child = child.children.get(move)
    return out, visits


def _listed(root, request: AnalyzeRequest) -> list[int]:
    """The root moves to report, best first."""
    n = root.child_n
    legal = root.legal.copy()
    for m in request.avoid:
        legal[m] = False
    if request.allow is not None:
        keep = np.zeros_like(legal)
        for m in request.allow:
            keep[m] = True
        legal &= keep
    visited = [int(m) for m in np.flatnonzero((n >= 1) & legal)]
    visited.sort(key=lambda m: (-float(n[m]), -float(root.prior[m])))
    moves = visited
    if request.min_moves > len(moves):
        rest = [int(m) for m in np.flatnonzero(legal & (n < 1))]
        rest.sort(key=lambda m: -float(root.prior[m]))
        moves = moves + rest[: request.min_moves - len(moves)]
    if request.max_moves:
        moves = moves[: request.max_moves]
    return moves


def format_analysis(root, size: int, request: AnalyzeRequest, ownership: np.ndarray | None) -> str:
    """One analysis line: ``info move ... pv ...`` per move, then ``rootInfo ...`` and
    ``ownership ...`` when asked.

    Values are from the view of the analysed player. ``winrate`` = (mean value + 1) / 2;
    ``scoreLead``, ``scoreMean`` and ``scoreSelfplay`` are all the search's mean score (the
    net has one score head); ``lcb`` is winrate - 1.96 * 0.5 / sqrt(visits) and ``utilityLcb``
    utility - 1.96 / sqrt(visits) (the largest spread a value in [-1, 1] can have: the search
    keeps no per-move variance).
    """
    n = root.child_n
    parts = []
    for order, m in enumerate(_listed(root, request)):
        visits = int(n[m])
        if visits:
            q = float(root.child_w[m]) / float(n[m])
            score = float(root.child_s[m]) / float(n[m])
        else:
            q, score = root.q_value(), root.mean_score()
        winrate = (q + 1.0) / 2.0
        prior = float(root.prior[m])
        spread = 1.0 / math.sqrt(max(visits, 1))
        lcb = winrate - Z95 * 0.5 * spread
        pv, pv_visits = _pv(root, m, size)
        if request.kata:
            line = (
                f"info move {to_gtp(m, size)} visits {visits} utility {q:.6f} "
                f"winrate {winrate:.6f} scoreMean {score:.4f} scoreLead {score:.4f} "
                f"scoreSelfplay {score:.4f} prior {prior:.6f} lcb {lcb:.6f} "
                f"utilityLcb {q - Z95 * spread:.6f} order {order} pv {' '.join(pv)}"
            )
            counts = " ".join(map(str, pv_visits))
            if request.pv_visits:
                line += f" pvVisits {counts}"
            if request.pv_edge_visits:
                line += f" pvEdgeVisits {counts}"
            parts.append(line)
        else:
            parts.append(
                f"info move {to_gtp(m, size)} visits {visits} winrate {_ten_k(winrate)} "
                f"prior {_ten_k(prior)} lcb {_ten_k(lcb)} order {order} pv {' '.join(pv)}"
            )
    if request.root_info:
        q, score = root.q_value(), root.mean_score()
        player = "B" if request.colour == BLACK else "W"
        parts.append(
            f"rootInfo visits {int(root.n_total)} utility {q:.6f} winrate {(q + 1) / 2:.6f} "
            f"scoreMean {score:.4f} scoreLead {score:.4f} scoreSelfplay {score:.4f} "
            f"currentPlayer {player}"
        )
    if ownership is not None:
        parts.append("ownership " + " ".join(f"{x:.4f}" for x in ownership.tolist()))
    return " ".join(parts)


def _ten_k(x: float) -> int:
    return int(round(min(max(x, 0.0), 1.0) * 10000))


class Analysis:
    """A running ``kata-analyze``: grows the search and writes a line every interval, until
    the next command ends it (``serve`` cancels it)."""

    def __init__(
        self, player: SearchPlayer, board: Board, request: AnalyzeRequest, max_visits: int
    ) -> None:
        self.player = player
        self.board = board
        self.request = request
        self.max_visits = max_visits

    async def _ownership(self) -> np.ndarray | None:
        if not self.request.ownership:
            return None
        # From the analysed player's view, as GUIs expect.
        return await self.player.ownership(self.board) * np.float32(self.request.colour)

    async def run(self, write: Callable[[str], None], deadline: float | None = None):
        """Search until ``max_visits`` (or ``deadline``, a ``time.monotonic()`` value), one
        line every interval and one at the end; returns the root."""
        req = self.request
        size = self.board.size
        ownership = await self._ownership()
        root = await self.player.grow(self.board, 1)
        next_report = time.monotonic() + req.interval
        while True:
            started = time.monotonic()
            if root.n_total < self.max_visits:
                target = min(int(root.n_total) + SEARCH_STEP, self.max_visits)
                root = await self.player.grow(self.board, target)
                done = root.n_total >= self.max_visits
            else:
                done = True
            now = time.monotonic()
            if deadline is not None and now + (now - started) > deadline:
                done = True
            if req.interval > 0 and (now >= next_report or done):
                write(format_analysis(root, size, req, ownership))
                next_report = now + req.interval
            if done:
                return root  # an analysis's answer ends with the next command
            await asyncio.sleep(0)


class GenmoveAnalysis:
    """``*genmove_analyze``: the move's own search, streamed as an analysis, then played.
    ``choose(root)`` turns the finished search into the move; ``play(move)`` plays it and
    returns its vertex (``resign`` or ``pass`` included)."""

    def __init__(
        self,
        analysis: Analysis | None,
        budget: float | None,
        choose: Callable[[object | None], object],
        play: Callable[[object], str],
    ) -> None:
        self.analysis = analysis
        self.budget = budget
        self.choose = choose
        self.play = play

    async def run(self, write: Callable[[str], None]) -> str:
        root = None
        if self.analysis is not None:
            deadline = None if self.budget is None else time.monotonic() + self.budget
            root = await self.analysis.run(write, deadline)
        move = self.choose(root)
        if asyncio.iscoroutine(move):
            move = await move
        return self.play(move)
