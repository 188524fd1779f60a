"""``kgrpc-gtp``: a GTP version 2 engine for Go GUIs and match tools.

Protocol (GTP 2): one command per line, optionally preceded by a numeric id; the answer is
``=id result`` or ``?id error`` followed by a blank line, flushed at once. Logs go to stderr.

Commands: protocol_version, name, version, known_command, list_commands, boardsize,
clear_board, komi, play, genmove, undo, showboard, final_score, final_status_list, quit,
loadsgf, time_settings, time_left, kgs-genmove_cleanup, kata-analyze, lz-analyze, stop.

Players: ``--model none`` is :class:`RandomPlayer` (uniform legal moves, never filling its own
single-point eyes); ``--model FILE.onnx`` is :class:`SearchPlayer`, the MCTS player
(:class:`kgrpc.mcts.player.MctsPlayer`) at ``--visits`` per move.

- **Time**: after ``time_settings`` (and ``time_left`` from the controller) ``genmove`` gets a
  time budget (:class:`Clock`); the search grows in small steps and stops at the budget or at
  ``--visits``, whichever comes first.
- **Dead stones**: ``final_status_list`` and ``final_score`` judge the position with
  :mod:`kgrpc.programs.eval.scoring` (pass-alive chains, seki, random playouts); ``final_score``
  is the area count once the dead stones are removed. ``kgs-genmove_cleanup`` plays like ``genmove``
  but, instead of passing, captures opponent stones that are dead.
- **Analysis**: ``kata-analyze`` / ``lz-analyze`` answer ``=`` at once, then stream one ``info``
  line every ``interval`` centiseconds while the search grows, until the next command (or an
  empty line) arrives, which ends the answer with the usual blank line. Needs a model.
- **Concurrency**: one asyncio loop; stdin is read by a thread (raw ``os.read``, so any kind of
  stdin works) that feeds a queue; ``quit`` or end of input closes the player (and its
  evaluator) before the loop ends, so no task is left pending.

Out-of-turn moves (``play white ...`` with black to move) are accepted, as GTP requires; moves
after two passes too (GUIs continue games to settle dead stones).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import numpy as np

from kgrpc import __version__, native
from kgrpc.cli_help import ProgramParser, env_flag
from kgrpc.evaluator import EvaluationError
from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.go.playout import random_move
from kgrpc.go.rules import CHINESE, Rules
from kgrpc.programs.eval import scoring

RESIGN = -1
# Visits added per step of a timed or analysing search (between two looks at the clock).
SEARCH_STEP = 16
# Longest principal variation printed by the analysis commands.
PV_LENGTH = 15
Z95 = 1.96

# The inference servers' token and CA (--inference): from the environment, like every program's
# (the variables of --token and --tls-ca, kgrpc.cli_help).
TOKEN_ENV = "KGRPC_GTP_TOKEN"
TLS_CA_ENV = "KGRPC_GTP_TLS_CA"


class Player(Protocol):
    async def genmove(self, board: Board, budget: float | None) -> int:
        """A move for the player to move in ``board`` within ``budget`` seconds (None: no
        limit): a point index, the pass index ``N*N``, or ``RESIGN``."""
        ...

    async def aclose(self) -> None: ...


class RandomPlayer:
    """Uniformly random legal moves, never filling its own eyes; passes when nothing is left."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    async def genmove(self, board: Board, budget: float | None = None) -> int:
        return random_move(board, self.rng)

    async def aclose(self) -> None:
        return None


class SearchPlayer:
    """The MCTS player: ``visits`` per move at most, fewer when the clock says so."""

    def __init__(self, mcts, visits: int) -> None:  # mcts: kgrpc.mcts.player.MctsPlayer
        self.mcts = mcts
        self.visits = visits

    async def genmove(self, board: Board, budget: float | None = None) -> int:
        from kgrpc.mcts.search import best_move

        if budget is None:
            return await self.mcts.choose_async(board, self.visits)
        deadline = time.monotonic() + budget
        target = SEARCH_STEP
        while True:
            started = time.monotonic()
            root = await self.mcts.analyze(board, min(target, self.visits))
            now = time.monotonic()
            # Stop when the next step would likely end past the deadline.
            if root.n_total >= self.visits or now + (now - started) > deadline:
                return best_move(root)
            target = int(root.n_total) + SEARCH_STEP

    async def grow(self, board: Board, visits: int):  # -> kgrpc.mcts.tree.Node
        return await self.mcts.analyze(board, visits)

    async def ownership(self, board: Board) -> np.ndarray:
        return await self.mcts.ownership(board)

    async def aclose(self) -> None:
        await self.mcts.aclose()


class PlayerUnavailable(RuntimeError):
    pass


def load_model_player(path: str, args: argparse.Namespace) -> SearchPlayer:
    """The MCTS player for an ONNX model: in-process ONNX Runtime, or inference servers."""
    from kgrpc.mcts.player import MctsPlayer

    try:
        mcts = MctsPlayer.from_model(
            path,
            visits=args.visits,
            inference=args.inference,
            token=args.token,
            seed=args.seed,
            tls_ca=args.tls_ca,
            score_utility_factor=args.score_utility_factor,
        )
    except (FileNotFoundError, ImportError) as exc:
        raise PlayerUnavailable(str(exc)) from exc
    return SearchPlayer(mcts, args.visits)


def make_player(args: argparse.Namespace) -> Player:
    if args.model == "none":
        return RandomPlayer(args.seed)
    return load_model_player(args.model, args)


class GtpError(Exception):
    """An error answer ("? message")."""


def _parse_colour(text: str) -> int:
    t = text.strip().lower()
    if t in ("b", "black"):
        return BLACK
    if t in ("w", "white"):
        return WHITE
    raise GtpError("invalid color")


# ---------------------------------------------------------------------------------- time
@dataclass
class Clock:
    """GTP time control (``time_settings``, ``time_left``) turned into a budget per move.

    GTP's rules: byo-yomi time > 0 with 0 stones means no limit; 0 and 0 means absolute time
    (main time only). ``time_left colour T S``: T seconds left, S stones to play in them
    (0 = still in main time). Without time_left the engine counts its own time.
    """

    main: float = 0.0
    byo_time: float = 0.0
    byo_stones: int = 0
    limited: bool = False
    left: dict[int, tuple[float, int]] = field(default_factory=dict)
    # Share of the computed time a move may use, and a margin for the pipes and process lag.
    safety: float = 0.8
    lag: float = 0.05
    min_budget: float = 0.02

    def set(self, main: float, byo_time: float, byo_stones: int) -> None:
        self.main, self.byo_time, self.byo_stones = main, byo_time, byo_stones
        self.limited = not (byo_stones == 0 and byo_time > 0)
        self.left = {}

    def update(self, colour: int, seconds: float, stones: int) -> None:
        self.left[colour] = (seconds, stones)

    def _state(self, colour: int) -> tuple[float, int]:
        if colour in self.left:
            return self.left[colour]
        if self.main > 0 or self.byo_stones == 0:
            return self.main, 0
        return self.byo_time, self.byo_stones

    def budget(self, colour: int, board: Board) -> float | None:
        """Seconds the next move of ``colour`` may take; None without a time limit."""
        if not self.limited:
            return None
        seconds, stones = self._state(colour)
        if stones > 0:
            per_move = seconds / stones
        else:
            empty = int(np.count_nonzero(board.stones == 0))
            per_move = seconds / max(10, empty // 2)
            if self.byo_stones > 0:
                # The move that ends the main time opens a fresh byo-yomi period.
                per_move = max(per_move, self.byo_time / self.byo_stones)
        return max(self.min_budget, per_move * self.safety - self.lag)

    def spent(self, colour: int, seconds: float) -> None:
        """Count ``seconds`` against ``colour`` until the controller's next time_left."""
        if not self.limited:
            return
        left, stones = self._state(colour)
        left -= seconds
        if stones > 0:
            stones -= 1
            if stones == 0:
                left, stones = self.byo_time, self.byo_stones
        elif left <= 0 and self.byo_stones > 0:
            left, stones = self.byo_time, self.byo_stones
        self.left[colour] = (max(left, 0.0), stones)


# ------------------------------------------------------------------------------ analysis
@dataclass(frozen=True)
class AnalyzeRequest:
    colour: int
    interval: float  # seconds between info lines; 0 = none
    kata: bool  # kata-analyze fields (floats, score, ownership) or lz-analyze (0..10000)
    ownership: bool = False
    max_moves: int = 0  # 0 = every move with visits
    min_moves: int = 0


def parse_analyze_args(args: list[str], to_play: int, kata: bool) -> AnalyzeRequest:
    """``[colour] [interval] key value ...`` as KataGo and Leela Zero read them."""
    colour, interval = to_play, 0.0
    rest = list(args)
    if rest and rest[0].lower() in ("b", "w", "black", "white"):
        colour = _parse_colour(rest.pop(0))
    if rest and _is_number(rest[0]):
        interval = float(rest.pop(0)) / 100.0
    options: dict[str, str] = {}
    if len(rest) % 2:
        raise GtpError(f"expected key value pairs, got {' '.join(rest)!r}")
    for key, value in zip(rest[::2], rest[1::2], strict=True):
        options[key] = value
    ownership = False
    max_moves = min_moves = 0
    for key, value in options.items():
        if key == "interval":
            if not _is_number(value):
                raise GtpError(f"interval must be a number of centiseconds, got {value!r}")
            interval = float(value) / 100.0
        elif key in ("maxmoves", "minmoves"):
            if not value.isdigit():
                raise GtpError(f"{key} must be a non-negative integer, got {value!r}")
            if key == "maxmoves":
                max_moves = int(value)
            else:
                min_moves = int(value)
        elif key == "ownership" and kata:
            if value not in ("true", "false"):
                raise GtpError(f"ownership must be true or false, got {value!r}")
            ownership = value == "true"
        else:
            raise GtpError(f"unsupported analysis option {key!r}")
    if not 0 <= interval < 1e6:
        raise GtpError("interval out of range")
    return AnalyzeRequest(colour, interval, kata, ownership, max_moves, min_moves)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _pv(node, first: int, size: int) -> list[str]:
    """The principal variation after ``first`` at ``node``: most visited child each step."""
    out = [to_gtp(first, size)]
    child = node.children.get(first)
    while child is not None and child.expanded and not child.terminal and len(out) < PV_LENGTH:
        n = child.child_n
        if n is None or float(n.max()) < 1:
            break
        move = int(np.argmax(n))
        out.append(to_gtp(move, size))
        child = child.children.get(move)
    return out


def format_analysis(root, size: int, request: AnalyzeRequest, ownership: np.ndarray | None) -> str:
    """One analysis line: ``info move ... pv ...`` per move, then ``ownership ...``.

    Values are from the view of the analysed player. ``winrate`` = (mean value + 1) / 2;
    ``scoreLead``, ``scoreMean`` and ``scoreSelfplay`` are all the search's mean score (the
    net has one score head); ``lcb`` is winrate - 1.96 * 0.5 / sqrt(visits) and ``utilityLcb``
    utility - 1.96 / sqrt(visits) (the largest spread a value in [-1, 1] can have: the search
    keeps no per-move variance).
    """
    n = root.child_n
    legal = root.legal
    visited = [int(m) for m in np.flatnonzero((n >= 1) & legal)]
    visited.sort(key=lambda m: (-float(n[m]), -float(root.prior[m])))
    moves = visited
    if request.min_moves > len(moves):
        rest = [int(m) for m in np.flatnonzero(legal & (n < 1))]
        rest.sort(key=lambda m: -float(root.prior[m]))
        moves = moves + rest[: request.min_moves - len(moves)]
    if request.max_moves:
        moves = moves[: request.max_moves]
    parts = []
    for order, m in enumerate(moves):
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
        pv = " ".join(_pv(root, m, size))
        if request.kata:
            parts.append(
                f"info move {to_gtp(m, size)} visits {visits} utility {q:.6f} "
                f"winrate {winrate:.6f} scoreMean {score:.4f} scoreLead {score:.4f} "
                f"scoreSelfplay {score:.4f} prior {prior:.6f} lcb {lcb:.6f} "
                f"utilityLcb {q - Z95 * spread:.6f} order {order} pv {pv}"
            )
        else:
            parts.append(
                f"info move {to_gtp(m, size)} visits {visits} winrate {_ten_k(winrate)} "
                f"prior {_ten_k(prior)} lcb {_ten_k(lcb)} order {order} pv {pv}"
            )
    if ownership is not None:
        parts.append("ownership " + " ".join(f"{x:.4f}" for x in ownership.tolist()))
    return " ".join(parts)


def _ten_k(x: float) -> int:
    return int(round(min(max(x, 0.0), 1.0) * 10000))


class Analysis:
    """A running ``kata-analyze``: grows the search and writes a line every interval."""

    def __init__(
        self, player: SearchPlayer, board: Board, request: AnalyzeRequest, max_visits: int
    ) -> None:
        self.player = player
        self.board = board
        self.request = request
        self.max_visits = max_visits

    async def run(self, write: Callable[[str], None]) -> None:
        req = self.request
        size = self.board.size
        ownership = None
        if req.ownership:
            # From the analysed player's view, as GUIs expect.
            ownership = await self.player.ownership(self.board) * np.float32(req.colour)
        root = await self.player.grow(self.board, 1)
        next_report = time.monotonic() + req.interval
        while True:
            if root.n_total < self.max_visits:
                target = min(int(root.n_total) + SEARCH_STEP, self.max_visits)
                root = await self.player.grow(self.board, target)
                done = root.n_total >= self.max_visits
            else:
                done = True
            now = time.monotonic()
            if req.interval > 0 and (now >= next_report or done):
                write(format_analysis(root, size, req, ownership))
                next_report = now + req.interval
            if done:
                return  # the search is as big as allowed; the answer ends with the next command
            await asyncio.sleep(0)


# -------------------------------------------------------------------------------- engine
class GtpEngine:
    COMMANDS = (
        "protocol_version",
        "name",
        "version",
        "known_command",
        "list_commands",
        "boardsize",
        "clear_board",
        "komi",
        "play",
        "genmove",
        "undo",
        "showboard",
        "final_score",
        "final_status_list",
        "quit",
        "loadsgf",
        "time_settings",
        "time_left",
        "kgs-genmove_cleanup",
        "kata-analyze",
        "lz-analyze",
        "stop",
    )

    def __init__(
        self,
        player: Player,
        rules: Rules = CHINESE,
        size: int = 19,
        komi: float = 7.5,
        *,
        analysis_max_visits: int = 20000,
    ) -> None:
        self.player = player
        self.rules = rules
        self.size = size
        self.komi = komi
        self.analysis_max_visits = analysis_max_visits
        self.clock = Clock()
        # (colour, move) pairs since the last clear: undo rebuilds the board from them.
        self.history: list[tuple[int, int]] = []
        self.setup: tuple[list[int], list[int], int] | None = None
        self.board = Board(size, rules, komi)
        self.done = False
        self._status_cache: tuple[bytes, scoring.StoneStatus] | None = None

    # ------------------------------------------------------------------ board handling
    def _rebuild(self) -> None:
        board = Board(self.size, self.rules, self.komi)
        if self.setup is not None:
            board.set_stones(*self.setup)
        for colour, move in self.history:
            self._apply(board, colour, move)
        self.board = board

    @staticmethod
    def _apply(board: Board, colour: int, move: int) -> None:
        if board.is_over():
            board.consecutive_passes = 0
        board.set_to_play(colour)
        board.play(move)

    def _play(self, colour: int, move: int) -> None:
        trial = self.board.copy()
        self._apply(trial, colour, move)  # raises IllegalMoveError, board untouched
        self.board = trial
        self.history.append((colour, move))

    def _view(self, colour: int) -> Board:
        """The position with ``colour`` to move, playable even after two passes."""
        view = self.board.copy()
        if view.is_over():
            view.consecutive_passes = 0
        view.set_to_play(colour)
        return view

    async def _status(self) -> scoring.StoneStatus:
        key = self.board.stones.tobytes()
        if self._status_cache is None or self._status_cache[0] != key:
            status = await asyncio.to_thread(scoring.stone_status, self.board.copy())
            self._status_cache = (key, status)
        return self._status_cache[1]

    # ------------------------------------------------------------------ commands
    async def handle(self, command: str, args: list[str]) -> str | Analysis:
        method = getattr(self, "cmd_" + command.replace("-", "_"), None)
        if command not in self.COMMANDS or method is None:
            raise GtpError("unknown command")
        result = method(args)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def close(self) -> None:
        await self.player.aclose()

    def cmd_protocol_version(self, args: list[str]) -> str:
        return "2"

    def cmd_name(self, args: list[str]) -> str:
        return "kgrpc"

    def cmd_version(self, args: list[str]) -> str:
        return __version__

    def cmd_known_command(self, args: list[str]) -> str:
        return "true" if args and args[0] in self.COMMANDS else "false"

    def cmd_list_commands(self, args: list[str]) -> str:
        return "\n".join(self.COMMANDS)

    def cmd_quit(self, args: list[str]) -> str:
        self.done = True
        return ""

    def cmd_stop(self, args: list[str]) -> str:
        return ""  # a running analysis has already stopped: any command stops it

    def cmd_boardsize(self, args: list[str]) -> str:
        try:
            size = int(args[0])
        except (IndexError, ValueError):
            raise GtpError("boardsize not an integer") from None
        if not 2 <= size <= 19:
            raise GtpError("unacceptable size")
        self.size = size
        self.cmd_clear_board([])
        return ""

    def cmd_clear_board(self, args: list[str]) -> str:
        self.history = []
        self.setup = None
        self._rebuild()
        return ""

    def cmd_komi(self, args: list[str]) -> str:
        try:
            komi = float(args[0])
        except (IndexError, ValueError):
            raise GtpError("komi not a float") from None
        if komi != komi or abs(komi) > 1000:
            raise GtpError("komi not a float")
        self.komi = komi
        self._rebuild()
        return ""

    def cmd_play(self, args: list[str]) -> str:
        if len(args) < 2:
            raise GtpError("invalid color or coordinate")
        colour = _parse_colour(args[0])
        if args[1].lower() == "resign":
            return ""
        try:
            move = from_gtp(args[1], self.size)
        except ValueError:
            raise GtpError("invalid coordinate") from None
        try:
            self._play(colour, move)
        except IllegalMoveError:
            raise GtpError("illegal move") from None
        return ""

    async def cmd_genmove(self, args: list[str]) -> str:
        return await self._genmove(args, cleanup=False)

    async def cmd_kgs_genmove_cleanup(self, args: list[str]) -> str:
        return await self._genmove(args, cleanup=True)

    async def _genmove(self, args: list[str], cleanup: bool) -> str:
        if not args:
            raise GtpError("invalid color")
        colour = _parse_colour(args[0])
        started = time.monotonic()
        view = self._view(colour)
        move = await self.player.genmove(view, self.clock.budget(colour, view))
        if cleanup and move == view.pass_move:
            move = await self._cleanup_move(view, colour)
        self.clock.spent(colour, time.monotonic() - started)
        if move == RESIGN:
            return "resign"
        try:
            self._play(colour, move)
        except IllegalMoveError as exc:
            # A player bug, not the controller's fault: say so and pass instead.
            print(f"kgrpc-gtp: player chose an illegal move ({exc}); passing", file=sys.stderr)
            move = self.board.pass_move
            self._play(colour, move)
        return to_gtp(move, self.size)

    async def _cleanup_move(self, view: Board, colour: int) -> int:
        """Instead of passing: a liberty of a dead opponent chain (fewest liberties first)."""
        status = await self._status()
        stones = view.stones
        dead = [p for p in status.dead if stones[p] == -colour]
        best: tuple[int, int] | None = None
        for chain in scoring.chains(view):
            if chain[0] not in dead:
                continue
            libs = view.group_liberties(chain[0])
            for p in chain:
                for q in scoring.neighbours(view.size)[p]:
                    if stones[q] == 0 and view.is_legal(q) and not view.is_own_eye(q, colour):
                        key = (libs, q)
                        if best is None or key < best:
                            best = key
        return view.pass_move if best is None else best[1]

    def cmd_undo(self, args: list[str]) -> str:
        if not self.history:
            raise GtpError("cannot undo")
        self.history.pop()
        self._rebuild()
        return ""

    def cmd_showboard(self, args: list[str]) -> str:
        b = self.board
        colour = "black" if b.to_play == BLACK else "white"
        return (
            f"\n{b}\n{colour} to play; captures: black {b.captures[BLACK]}, "
            f"white {b.captures[WHITE]}; rules {b.rules}, komi {b.komi:g}"
        )

    async def cmd_final_score(self, args: list[str]) -> str:
        status = await self._status()
        return scoring.result_text(self.board.score(status.dead))

    async def cmd_final_status_list(self, args: list[str]) -> str:
        if len(args) != 1 or args[0].lower() not in ("alive", "dead", "seki"):
            raise GtpError("final_status_list takes one of alive, dead, seki")
        status = await self._status()
        points = getattr(status, args[0].lower())
        return " ".join(to_gtp(p, self.size) for p in points)

    def cmd_time_settings(self, args: list[str]) -> str:
        try:
            main, byo_time, byo_stones = float(args[0]), float(args[1]), int(args[2])
        except (IndexError, ValueError):
            raise GtpError("time_settings takes main_time byo_yomi_time byo_yomi_stones") from None
        if (
            len(args) != 3
            or not all(math.isfinite(x) and x >= 0 for x in (main, byo_time))
            or byo_stones < 0
        ):
            raise GtpError("time_settings takes main_time byo_yomi_time byo_yomi_stones")
        self.clock.set(main, byo_time, byo_stones)
        return ""

    def cmd_time_left(self, args: list[str]) -> str:
        if len(args) != 3:
            raise GtpError("time_left takes color time stones")
        colour = _parse_colour(args[0])
        try:
            seconds, stones = float(args[1]), int(args[2])
        except ValueError:
            raise GtpError("time_left takes color time stones") from None
        if not math.isfinite(seconds) or stones < 0:
            raise GtpError("time_left takes color time stones")
        self.clock.update(colour, max(seconds, 0.0), stones)
        return ""

    def cmd_kata_analyze(self, args: list[str]) -> Analysis:
        return self._analysis(args, kata=True)

    def cmd_lz_analyze(self, args: list[str]) -> Analysis:
        return self._analysis(args, kata=False)

    def _analysis(self, args: list[str], kata: bool) -> Analysis:
        if not isinstance(self.player, SearchPlayer):
            raise GtpError("analysis needs a model (kgrpc-gtp --model FILE.onnx)")
        request = parse_analyze_args(args, self.board.to_play, kata)
        return Analysis(self.player, self._view(request.colour), request, self.analysis_max_visits)

    def cmd_loadsgf(self, args: list[str]) -> str:
        from kgrpc.sgf import SgfError, parse_sgf

        if not args:
            raise GtpError("missing file name")
        try:
            with open(args[0], encoding="utf-8", errors="replace") as f:
                game = parse_sgf(f.read())
        except OSError:
            raise GtpError("cannot load file") from None
        except SgfError as exc:
            raise GtpError(f"cannot load file: {exc}") from None
        moves = game.moves
        if len(args) > 1:
            try:
                # GTP: the position before move number `n` (1-based), i.e. n-1 moves played.
                upto = int(args[1]) - 1
            except ValueError:
                raise GtpError("move number not an integer") from None
            moves = moves[: max(upto, 0)]
        old = (self.size, self.komi, self.rules, self.history, self.setup)
        self.size, self.komi, self.rules = game.size, game.komi, game.rules
        self.setup = None
        if game.setup_black or game.setup_white or game.first_player != BLACK:
            self.setup = (game.setup_black, game.setup_white, game.first_player)
        self.history = list(moves)
        try:
            self._rebuild()
        except (IllegalMoveError, ValueError) as exc:
            self.size, self.komi, self.rules, self.history, self.setup = old
            self._rebuild()
            raise GtpError(f"cannot load file: {exc}") from None
        next_colour = moves[-1][0] * -1 if moves else game.first_player
        return "black" if next_colour == BLACK else "white"


# ------------------------------------------------------------------------------- serving
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


def build_parser() -> argparse.ArgumentParser:
    """Every flag also reads ``KGRPC_GTP_<FLAG>`` (kgrpc.cli_help: flag > variable > default)."""
    p = ProgramParser(prog="kgrpc-gtp", description="kgrpc GTP version 2 engine", env_program="gtp")
    env_flag(p, "--rules", default="chinese", help="rules preset")
    env_flag(
        p,
        "--model",
        default="none",
        help="ONNX model file, or 'none' for random play",
    )
    env_flag(p, "--size", type=int, default=19, help="initial board size")
    env_flag(p, "--komi", type=float, default=7.5, help="initial komi")
    env_flag(p, "--seed", type=int, default=None, help="random seed of the player")
    env_flag(
        p,
        "--visits",
        type=int,
        default=800,
        help="MCTS visits per move with --model FILE.onnx; fewer when time_settings/time_left "
        "leave less time",
    )
    env_flag(
        p,
        "--score-utility-factor",
        type=float,
        default=0.0,
        help="weight of the expected score in the search's utility, as in self-play (the learn9 "
        "profile trains with 0.5); 0 = win/loss only",
    )
    env_flag(
        p,
        "--analysis-max-visits",
        type=int,
        default=20000,
        help="kata-analyze stops growing its search at this many visits",
    )
    env_flag(
        p,
        "--inference",
        default=None,
        metavar="ADDR[,ADDR]",
        help="evaluate on these inference servers instead of in-process ONNX Runtime",
    )
    env_flag(
        p,
        "--token",
        default=None,
        secret=True,
        help="token for the inference servers (best given in the environment: a flag shows in ps)",
    )
    env_flag(
        p,
        "--tls-ca",
        default=None,
        metavar="FILE",
        show="none, plaintext",
        help="CA certificate (PEM) of TLS inference servers",
    )
    return p


async def _run(engine: GtpEngine) -> None:
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    start_line_reader(sys.stdin.fileno(), asyncio.get_running_loop(), queue)
    try:
        with contextlib.suppress(BrokenPipeError):
            await serve(engine, queue, sys.stdout)
    finally:
        await engine.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rules = Rules.from_name(args.rules)
    except ValueError as exc:
        print(f"kgrpc-gtp: {exc}", file=sys.stderr)
        return 2
    if not 2 <= args.size <= 19:
        print(f"kgrpc-gtp: --size {args.size} out of range 2..19", file=sys.stderr)
        return 2
    if args.visits < 1 or args.analysis_max_visits < 1:
        print("kgrpc-gtp: --visits and --analysis-max-visits must be >= 1", file=sys.stderr)
        return 2
    from kgrpc.mcts.config import SearchConfig

    try:  # the search's own check, before a model is loaded
        SearchConfig(visits=args.visits, score_utility_factor=args.score_utility_factor)
    except ValueError as exc:
        print(f"kgrpc-gtp: --score-utility-factor: {exc}", file=sys.stderr)
        return 2
    args.token = args.token or None
    args.tls_ca = args.tls_ca or None
    if args.tls_ca and args.inference:
        from kgrpc.net.channel import load_ca

        try:  # a wrong file fails here, not at the first genmove
            load_ca(args.tls_ca)
        except ValueError as exc:
            print(f"kgrpc-gtp: {exc}", file=sys.stderr)
            return 2
    try:
        player = make_player(args)
    except PlayerUnavailable as exc:
        print(f"kgrpc-gtp: {exc}", file=sys.stderr)
        return 2
    print(f"kgrpc-gtp {__version__}: rules {rules}, model {args.model}", file=sys.stderr)
    print(f"kgrpc-gtp: {native.describe()}", file=sys.stderr)  # stdout is the GTP channel
    engine = GtpEngine(
        player, rules, args.size, args.komi, analysis_max_visits=args.analysis_max_visits
    )
    asyncio.run(_run(engine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
