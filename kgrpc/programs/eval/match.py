"""Games between two GTP engines: one game, a whole match, their files.

Each game starts its own two engine processes (``boardsize``, ``clear_board``, ``komi``),
asks the side to move for ``genmove`` and tells the other side ``play``. Our own board keeps
the game and checks every move. A game ends

- with two passes in a row, or at the move cap: the referee judges the dead stones and the
  area count decides (``reason`` "score" / "move cap");
- when a side answers ``resign`` ("resign");
- when a side fails (``forfeit``: it crashed, answered ``?``, gave no answer within the move
  timeout, played an illegal move, or refused a legal one): it loses, and ``detail`` says why.

Engine A plays black in even games (0, 2, ...) and white in odd ones. Results are counted
from A's side. Two deterministic engines can play one game again and again: each game keeps a
digest of its move sequence (:func:`sequence_digest`), and a match counts its distinct games
(:meth:`MatchResult.distinct_games`), so a report can say how many of its games differ.
With an output directory every game is written as ``games/game-NNNN.sgf`` as soon as it ends,
and the match as ``games.csv`` and ``summary.json`` (written atomically).
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kgrpc.durable import atomic_write_bytes
from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.coords import from_gtp, to_gtp
from kgrpc.go.rules import CHINESE, Rules
from kgrpc.programs.eval.engine import EngineError, EngineFailure, GtpProcess
from kgrpc.programs.eval.referee import Referee
from kgrpc.rating import Rating
from kgrpc.sgf import board_to_sgf, result_string


@dataclass(frozen=True)
class EngineSpec:
    name: str
    command: list[str]


@dataclass(frozen=True)
class MatchSettings:
    games: int
    size: int = 9
    komi: float = 7.5
    rules: Rules = CHINESE
    parallel: int = 1
    move_timeout: float = 120.0
    # Engines load models at start: the setup commands get this long.
    start_timeout: float = 120.0
    max_moves: int = 0  # 0: 3 * N * N

    def __post_init__(self) -> None:
        if self.games < 1:
            raise ValueError(f"games must be >= 1, got {self.games}")
        if not 2 <= self.size <= 19:
            raise ValueError(f"size {self.size} out of range 2..19")
        if self.parallel < 1:
            raise ValueError(f"parallel must be >= 1, got {self.parallel}")
        if self.move_timeout <= 0 or self.start_timeout <= 0:
            raise ValueError("timeouts must be > 0")
        if self.max_moves < 0:
            raise ValueError(f"max_moves must be >= 0, got {self.max_moves}")

    @property
    def move_cap(self) -> int:
        return self.max_moves or 3 * self.size * self.size


@dataclass
class GameResult:
    index: int
    black: str
    white: str
    winner: int  # BLACK, WHITE or 0 (a draw)
    reason: str  # score, move cap, resign, forfeit
    score: float | None = None  # black - white - komi after removing dead stones
    detail: str = ""
    moves: int = 0
    dead: list[str] = field(default_factory=list)
    referee: str = ""
    sgf: str = ""
    seconds: float = 0.0
    # SHA-256 (hex) of who played which colour, the moves and the ending: equal digests are
    # the same game played again (sequence_digest).
    sequence: str = ""

    @property
    def result(self) -> str:
        """SGF RE: B+3.5, W+R (resign), B+F (forfeit), 0 (draw)."""
        if self.reason == "forfeit":
            return "0" if self.winner == 0 else f"{'B' if self.winner == BLACK else 'W'}+F"
        return result_string(self.winner, self.score or 0.0, self.reason == "resign")

    def winner_name(self) -> str:
        return {BLACK: self.black, WHITE: self.white}.get(self.winner, "")


@dataclass
class MatchResult:
    a: str
    b: str
    settings: MatchSettings
    games: list[GameResult] = field(default_factory=list)

    def counts(self) -> tuple[int, int, int]:
        """(wins, losses, draws) of A."""
        wins = sum(1 for g in self.games if g.winner and g.winner_name() == self.a)
        draws = sum(1 for g in self.games if g.winner == 0)
        return wins, len(self.games) - wins - draws, draws

    def rating(self) -> Rating:
        return Rating.from_results(*self.counts())

    def distinct_games(self) -> int:
        """How many games are not a repeat of another (same engines on the same colours, same
        moves, same ending); a game without a digest counts as distinct."""
        digests = [g.sequence for g in self.games if g.sequence]
        return len(set(digests)) + sum(1 for g in self.games if not g.sequence)

    def reasons(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for g in self.games:
            out[g.reason] = out.get(g.reason, 0) + 1
        return out

    def summary(self) -> dict:
        r = self.rating()
        s = self.settings
        return {
            "a": self.a,
            "b": self.b,
            "games": len(self.games),
            "wins": r.wins,
            "losses": r.losses,
            "draws": r.draws,
            "distinct_games": self.distinct_games(),
            "win_rate": r.rate,
            "win_rate_low": r.rate_low,
            "win_rate_high": r.rate_high,
            "elo": r.elo,
            "elo_low": _finite(r.elo_low),
            "elo_high": _finite(r.elo_high),
            "reasons": self.reasons(),
            "size": s.size,
            "komi": s.komi,
            "rules": str(s.rules),
        }


def _finite(x: float) -> float | str:
    """JSON has no infinity: +inf / -inf become strings."""
    if x == float("inf"):
        return "inf"
    if x == float("-inf"):
        return "-inf"
    return x


def colour_name(colour: int) -> str:
    return "black" if colour == BLACK else "white"


def sequence_digest(black: str, white: str, moves: list[str], ending: str) -> str:
    """SHA-256 (hex) of a game: the engines' names on each colour, the moves as GTP vertices
    and how it ended (``reason`` and winner), one per line. The names count: the same moves
    with the colours swapped between the engines are another game (another result for A)."""
    text = "\n".join([f"black {black}", f"white {white}", " ".join(moves), ending])
    return hashlib.sha256(text.encode()).hexdigest()


async def play_game(
    index: int, black: EngineSpec, white: EngineSpec, settings: MatchSettings, referee: Referee
) -> tuple[GameResult, Board]:
    """One game; the result and the final board (moves played from the empty board)."""
    started = time.monotonic()
    specs = {BLACK: black, WHITE: white}
    engines = {c: GtpProcess(s.command, s.name) for c, s in specs.items()}
    size = settings.size
    board = Board(size, settings.rules, settings.komi, max_moves=settings.move_cap)

    def end(winner: int, reason: str, **kw) -> tuple[GameResult, Board]:
        played = [to_gtp(m, size) for m in board.moves]
        result = GameResult(
            index,
            black.name,
            white.name,
            winner,
            reason,
            moves=len(board.moves),
            seconds=time.monotonic() - started,
            sequence=sequence_digest(black.name, white.name, played, f"{reason} {winner}"),
            **kw,
        )
        return result, board

    def forfeit(colour: int, why: str) -> tuple[GameResult, Board]:
        return end(-colour, "forfeit", detail=f"{specs[colour].name} ({colour_name(colour)}) {why}")

    try:
        for colour in (BLACK, WHITE):
            try:
                for command in (f"boardsize {size}", "clear_board", f"komi {settings.komi:g}"):
                    await engines[colour].send(command, settings.start_timeout)
            except EngineError as exc:
                return forfeit(colour, f"failed to set up the game: {exc}")
        while not board.is_over():
            colour = board.to_play
            mover, other = engines[colour], engines[-colour]
            try:
                answer = await mover.send(f"genmove {colour_name(colour)}", settings.move_timeout)
            except EngineError as exc:
                return forfeit(colour, str(exc))
            vertex = answer.split()[0].lower() if answer.split() else ""
            if vertex == "resign":
                return end(-colour, "resign")
            try:
                move = from_gtp(vertex, size)
            except ValueError:
                return forfeit(colour, f"answered {answer!r} to genmove")
            if not board.is_legal(move):
                return forfeit(colour, f"played the illegal move {vertex}")
            board.play(move)
            try:
                await other.send(
                    f"play {colour_name(colour)} {to_gtp(move, size)}", settings.move_timeout
                )
            except EngineFailure as exc:
                return forfeit(
                    -colour, f"refused the legal move {to_gtp(move, size)}: {exc.message}"
                )
            except EngineError as exc:
                return forfeit(-colour, str(exc))
        judged = await referee.judge(board)
        winner = BLACK if judged.score > 0 else WHITE if judged.score < 0 else 0
        reason = "score" if board.consecutive_passes >= 2 else "move cap"
        return end(
            winner,
            reason,
            score=judged.score,
            referee=judged.referee,
            detail=judged.note,
            dead=[to_gtp(p, size) for p in judged.dead],
        )
    finally:
        await asyncio.gather(*(e.close() for e in engines.values()))


GAME_FIELDS = (
    "index",
    "black",
    "white",
    "result",
    "reason",
    "detail",
    "moves",
    "score",
    "dead",
    "referee",
    "sgf",
    "seconds",
    "sequence",
)


def games_csv(games: list[GameResult]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(GAME_FIELDS)
    for g in sorted(games, key=lambda g: g.index):
        writer.writerow(
            [
                g.index,
                g.black,
                g.white,
                g.result,
                g.reason,
                g.detail,
                g.moves,
                "" if g.score is None else f"{g.score:g}",
                " ".join(g.dead),
                g.referee,
                g.sgf,
                f"{g.seconds:.1f}",
                g.sequence,
            ]
        )
    return buf.getvalue()


async def run_match(
    a: EngineSpec,
    b: EngineSpec,
    settings: MatchSettings,
    referee: Referee,
    out_dir: Path | None = None,
    on_game: Callable[[GameResult, MatchResult], None] | None = None,
) -> MatchResult:
    """Play ``settings.games`` games, ``settings.parallel`` at a time; A is black in even ones."""
    if a.name == b.name:
        raise ValueError(f"the two engines need different names, both are {a.name!r}")
    match = MatchResult(a.name, b.name, settings)
    gate = asyncio.Semaphore(settings.parallel)

    async def one(i: int) -> None:
        black, white = (a, b) if i % 2 == 0 else (b, a)
        async with gate:
            result, board = await play_game(i, black, white, settings, referee)
        if out_dir is not None:
            name = f"game-{i:04d}.sgf"
            sgf = board_to_sgf(board, black=black.name, white=white.name, result=result.result)
            atomic_write_bytes(out_dir / "games" / name, sgf.encode(), mkdir=True)
            result.sgf = f"games/{name}"
        match.games.append(result)
        if on_game is not None:
            on_game(result, match)

    tasks = [asyncio.ensure_future(one(i)) for i in range(settings.games)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    match.games.sort(key=lambda g: g.index)
    if out_dir is not None:
        write_match(match, out_dir)
    return match


def write_match(match: MatchResult, out_dir: Path) -> None:
    atomic_write_bytes(out_dir / "games.csv", games_csv(match.games).encode(), mkdir=True)
    data = {
        "summary": match.summary(),
        "settings": _settings_json(match.settings),
        "games": [asdict(g) | {"result": g.result} for g in match.games],
    }
    atomic_write_bytes(
        out_dir / "summary.json", (json.dumps(data, indent=1) + "\n").encode(), mkdir=True
    )


def _settings_json(s: MatchSettings) -> dict:
    return {
        "games": s.games,
        "size": s.size,
        "komi": s.komi,
        "rules": str(s.rules),
        "parallel": s.parallel,
        "move_timeout": s.move_timeout,
        "max_moves": s.move_cap,
    }
