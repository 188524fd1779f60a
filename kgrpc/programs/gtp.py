"""``kgrpc-gtp``: a GTP version 2 engine for Go GUIs and match tools.

Protocol (GTP 2): one command per line, optionally preceded by a numeric id; the answer is
``=id result`` or ``?id error`` followed by a blank line, flushed at once. Logs go to stderr.

Commands: protocol_version, name, version, known_command, list_commands, boardsize,
clear_board, komi, play, genmove, undo, showboard, final_score, quit, loadsgf.

Who chooses moves is pluggable: any object with ``choose(board) -> int`` (a point index, the
pass index ``N*N``, or ``RESIGN``). ``--model none`` uses :class:`RandomPlayer` (uniform legal
moves, never filling its own single-point eyes). ``--model FILE.onnx`` goes through
:func:`load_model_player`, the one function the MCTS player plugs into.

Out-of-turn moves (``play white ...`` with black to move) are accepted, as GTP requires; moves
after two passes too (GUIs continue games to settle dead stones).
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Protocol, TextIO

from kgrpc import __version__
from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.go.playout import random_move
from kgrpc.go.rules import CHINESE, Rules

RESIGN = -1


class MoveChooser(Protocol):
    def choose(self, board: Board) -> int: ...


class RandomPlayer:
    """Uniformly random legal moves, never filling its own eyes; passes when nothing is left."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def choose(self, board: Board) -> int:
        return random_move(board, self.rng)


class PlayerUnavailable(RuntimeError):
    pass


def load_model_player(path: str, args: argparse.Namespace) -> MoveChooser:
    """The MCTS player for an ONNX model: in-process ONNX Runtime, or inference servers."""
    from kgrpc.mcts.player import MctsPlayer

    try:
        return MctsPlayer.from_model(path, visits=args.visits, inference=args.inference,
                                     token=args.token, seed=args.seed)
    except (FileNotFoundError, ImportError) as exc:
        raise PlayerUnavailable(str(exc)) from exc


def make_player(args: argparse.Namespace) -> MoveChooser:
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
        "quit",
        "loadsgf",
    )

    def __init__(
        self, player: MoveChooser, rules: Rules = CHINESE, size: int = 19, komi: float = 7.5
    ) -> None:
        self.player = player
        self.rules = rules
        self.size = size
        self.komi = komi
        # (colour, move) pairs since the last clear: undo rebuilds the board from them.
        self.history: list[tuple[int, int]] = []
        self.setup: tuple[list[int], list[int], int] | None = None
        self.board = Board(size, rules, komi)
        self.done = False

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

    # ------------------------------------------------------------------ commands
    def handle(self, command: str, args: list[str]) -> str:
        method = getattr(self, f"cmd_{command}", None)
        if command not in self.COMMANDS or method is None:
            raise GtpError("unknown command")
        return method(args)

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

    def cmd_genmove(self, args: list[str]) -> str:
        if not args:
            raise GtpError("invalid color")
        colour = _parse_colour(args[0])
        view = self.board.copy()
        if view.is_over():
            view.consecutive_passes = 0
        view.set_to_play(colour)
        move = self.player.choose(view)
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

    def cmd_final_score(self, args: list[str]) -> str:
        # Every stone on the board counts as alive: no dead-stone guessing.
        score = self.board.score()
        if score == 0:
            return "0"
        return f"{'B' if score > 0 else 'W'}+{abs(score):g}"

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


def _clean(line: str) -> str:
    line = line.split("#", 1)[0]
    out = []
    for ch in line:
        if ch == "\t":
            out.append(" ")
        elif ord(ch) >= 32 and ord(ch) != 127:
            out.append(ch)
    return "".join(out).strip()


def serve(engine: GtpEngine, stdin: TextIO, stdout: TextIO) -> None:
    for raw in stdin:
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
            result = engine.handle(command, args)
            stdout.write(f"={ident} {result}".rstrip(" ") + "\n\n")
        except GtpError as exc:
            stdout.write(f"?{ident} {exc}\n\n")
        except Exception as exc:  # keep the session alive for the controller
            print(f"kgrpc-gtp: internal error on {line!r}: {exc!r}", file=sys.stderr)
            stdout.write(f"?{ident} internal error: {exc}\n\n")
        stdout.flush()
        if engine.done:
            break


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kgrpc-gtp", description="kgrpc GTP version 2 engine")
    p.add_argument("--rules", default="chinese", help="rules preset (default chinese)")
    p.add_argument(
        "--model", default="none", help="ONNX model file, or 'none' for random play (default)"
    )
    p.add_argument("--size", type=int, default=19, help="initial board size (default 19)")
    p.add_argument("--komi", type=float, default=7.5)
    p.add_argument("--seed", type=int, default=None, help="random seed of the player")
    p.add_argument("--visits", type=int, default=800,
                   help="MCTS visits per move with --model FILE.onnx (default 800)")
    p.add_argument("--inference", default=None, metavar="ADDR[,ADDR]",
                   help="evaluate on these inference servers instead of in-process ONNX Runtime")
    p.add_argument("--token", default=None, help="token for the inference servers")
    return p


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
    try:
        player = make_player(args)
    except PlayerUnavailable as exc:
        print(f"kgrpc-gtp: {exc}", file=sys.stderr)
        return 2
    print(f"kgrpc-gtp {__version__}: rules {rules}, model {args.model}", file=sys.stderr)
    serve(GtpEngine(player, rules, args.size, args.komi), sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
