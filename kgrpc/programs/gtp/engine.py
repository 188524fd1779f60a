"""The GTP engine: every command (``cmd_<name>``, dashes as underscores) on the game of
:mod:`~kgrpc.programs.gtp.game`; those that set up a position are in
:mod:`~kgrpc.programs.gtp.position`."""

from __future__ import annotations

import inspect
import math
import sys
import time

from kgrpc import __version__
from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.programs.eval import scoring
from kgrpc.programs.gtp import setup
from kgrpc.programs.gtp.analysis import (
    Analysis,
    AnalyzeError,
    GenmoveAnalysis,
    parse_analyze_args,
)
from kgrpc.programs.gtp.game import GtpError, colour_of
from kgrpc.programs.gtp.players import RESIGN, SearchPlayer
from kgrpc.programs.gtp.position import PositionCommands


class GtpEngine(PositionCommands):
    COMMANDS = (
        "protocol_version",
        "name",
        "version",
        "known_command",
        "list_commands",
        "boardsize",
        "clear_board",
        "komi",
        "get_komi",
        "play",
        "genmove",
        "undo",
        "showboard",
        "final_score",
        "final_status_list",
        "quit",
        "loadsgf",
        "printsgf",
        "time_settings",
        "time_left",
        "fixed_handicap",
        "place_free_handicap",
        "set_free_handicap",
        "kata-set-rules",
        "kata-set-rule",
        "kata-get-rules",
        "kgs-rules",
        "kgs-genmove_cleanup",
        "kata-analyze",
        "lz-analyze",
        "analyze",
        "kata-genmove_analyze",
        "lz-genmove_analyze",
        "genmove_analyze",
        "clear_cache",
        "stop",
    )

    # ------------------------------------------------------------------ commands
    async def handle(self, command: str, args: list[str]) -> str | Analysis | GenmoveAnalysis:
        method = getattr(self, "cmd_" + command.replace("-", "_"), None)
        if command not in self.COMMANDS or method is None:
            raise GtpError("unknown command")
        try:
            result = method(args)
            if inspect.isawaitable(result):
                result = await result
        except (AnalyzeError, setup.SetupError) as exc:
            raise GtpError(str(exc)) from None
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

    def cmd_clear_cache(self, args: list[str]) -> str:
        if isinstance(self.player, SearchPlayer):
            self.player.clear_cache()
        return ""

    # ------------------------------------------------------------------ moves
    def cmd_play(self, args: list[str]) -> str:
        if len(args) < 2:
            raise GtpError("invalid color or coordinate")
        colour = colour_of(args[0])
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
        colour = colour_of(args[0])
        started = time.monotonic()
        view = self._view(colour)
        move = await self.player.genmove(view, self.clock.budget(colour, view))
        if cleanup and move == view.pass_move:
            move = await self._cleanup_move(view, colour)
        return self._finish_move(colour, move, started)

    def _finish_move(self, colour: int, move: int, started: float) -> str:
        """Count the move's time, play it; its vertex (``resign`` for a resignation)."""
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

    # ------------------------------------------------------------------ time
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
        colour = colour_of(args[0])
        try:
            seconds, stones = float(args[1]), int(args[2])
        except ValueError:
            raise GtpError("time_left takes color time stones") from None
        if not math.isfinite(seconds) or stones < 0:
            raise GtpError("time_left takes color time stones")
        self.clock.update(colour, max(seconds, 0.0), stones)
        return ""

    # ------------------------------------------------------------------ analysis
    def cmd_kata_analyze(self, args: list[str]) -> Analysis:
        return self._analysis(args, kata=True)

    def cmd_lz_analyze(self, args: list[str]) -> Analysis:
        return self._analysis(args, kata=False)

    cmd_analyze = cmd_lz_analyze

    def _analysis(self, args: list[str], kata: bool) -> Analysis:
        if not isinstance(self.player, SearchPlayer):
            raise GtpError("analysis needs a model (kgrpc-gtp --model FILE.onnx)")
        request = parse_analyze_args(args, self.board.to_play, kata, self.size)
        return Analysis(self.player, self._view(request.colour), request, self.analysis_max_visits)

    def cmd_kata_genmove_analyze(self, args: list[str]) -> GenmoveAnalysis:
        return self._genmove_analysis(args, kata=True)

    def cmd_lz_genmove_analyze(self, args: list[str]) -> GenmoveAnalysis:
        return self._genmove_analysis(args, kata=False)

    cmd_genmove_analyze = cmd_lz_genmove_analyze

    def _genmove_analysis(self, args: list[str], kata: bool) -> GenmoveAnalysis:
        """As genmove, its search streamed as an analysis; without a model, the random
        player's move and no analysis lines."""
        request = parse_analyze_args(args, self.board.to_play, kata, self.size)
        colour, started = request.colour, time.monotonic()
        view = self._view(colour)
        budget = self.clock.budget(colour, view)
        player = self.player
        if isinstance(player, SearchPlayer):
            from kgrpc.mcts.search import best_move

            analysis = Analysis(player, view, request, player.visits)
            return GenmoveAnalysis(
                analysis,
                budget,
                lambda root: best_move(root),
                lambda move: "play " + self._finish_move(colour, move, started),
            )
        return GenmoveAnalysis(
            None,
            budget,
            lambda _root: player.genmove(view, budget),
            lambda move: "play " + self._finish_move(colour, move, started),
        )
