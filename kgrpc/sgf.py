"""SGF (FF[4]) export and import of games.

Written: ``(;FF[4]GM[1]CA[UTF-8]AP[kgrpc:VERSION]SZ[N]KM[komi]RU[rules]PB[black model]
PW[white model]RE[result];B[pd]KGV[0.532]KGN[800]C[...];W[dp]...)``. ``RU`` is the preset name
(``Chinese``, ``Japanese``, ``AGA``, ``Tromp-Taylor``); ``RE`` is ``B+3.5``, ``W+R`` or ``0``. Each
move node may carry the private properties ``KGV`` (the search's root value, mover's view, in
[-1, 1]) and ``KGN`` (root visit count); ``KGF[1]`` marks a full-search move. The same figures
go into the node's comment for people (:func:`move_comment`). Passes are ``B[]``.

Read: the main line (first variation) of the first game tree: SZ, KM, RU, PB, PW, RE, PL, AB/AW
setup stones, B/W moves (``tt`` is read as a pass on boards up to 19x19), KGV/KGN/KGF.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kgrpc import native
from kgrpc.go.board import BLACK, WHITE, Board
from kgrpc.go.coords import from_sgf, to_sgf
from kgrpc.go.rules import CHINESE, PRESETS, Rules
from kgrpc.v1 import common_pb2, records_pb2

if TYPE_CHECKING:
    from kgrpc.records.replay import ReplayResult

_RU_NAMES = {
    "chinese": "Chinese",
    "japanese": "Japanese",
    "aga": "AGA",
    "tromp-taylor": "Tromp-Taylor",
}


class SgfError(ValueError):
    """Malformed or unsupported SGF."""


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("]", "\\]")


def _format_number(x: float) -> str:
    return f"{x:g}"


def result_string(winner: int, score: float, resigned: bool) -> str:
    if winner == 0:
        return "0"
    side = "B" if winner == BLACK else "W"
    return f"{side}+R" if resigned else f"{side}+{_format_number(abs(score))}"


def move_comment(colour: str, value: float, visits: int | None, full: bool) -> str:
    """The comment of a move node: ``root value +0.532 for B, 800 visits, full search``."""
    text = f"root value {value:+.3f} for {colour}"
    if visits is not None:
        text += f", {visits} visits"
    return text + (", full search" if full else "")


@functools.cache
def _sgf_points(size: int) -> tuple[str, ...]:
    """SGF point of every move index of a board, pass (``""``) last."""
    return tuple(to_sgf(p, size) for p in range(size * size + 1))


def _write(
    size: int,
    komi: float,
    rules: Rules,
    moves: list[int],
    *,
    black: str,
    white: str,
    result: str | None,
    values: list[float] | None = None,
    visits: list[int] | None = None,
    full: list[bool] | None = None,
) -> str:
    from kgrpc import __version__

    rules_name = _RU_NAMES.get(rules.name or "", str(rules))
    head = [
        "FF[4]GM[1]CA[UTF-8]",
        f"AP[kgrpc:{_escape(__version__)}]",
        f"SZ[{size}]KM[{_format_number(komi)}]RU[{_escape(rules_name)}]",
    ]
    if black:
        head.append(f"PB[{_escape(black)}]")
    if white:
        head.append(f"PW[{_escape(white)}]")
    if result is not None:
        head.append(f"RE[{_escape(result)}]")
    first = "(;" + "".join(head)
    if native.ENABLED:
        # None when a value is not finite (C spells those differently): then the Python text.
        text = native.ext.sgf_moves_text(first, len(first), size, moves, values, visits, full)
        if text is not None:
            return text
    return _moves_text_python(first, size, moves, values, visits, full)


def _moves_text_python(
    first: str,
    size: int,
    moves: list[int],
    values: list[float] | None,
    visits: list[int] | None,
    full: list[bool] | None,
) -> str:
    """The SGF text from the root node ``first`` on: the move nodes, wrapped in lines of at most
    78 characters, and the closing parenthesis. The reference of the native core's
    ``sgf_moves_text`` (which the writer uses when installed, so this readable form is off the
    hot path; tests/test_sgf.py compares them).
    """
    parts = [first]
    nn = size * size
    points = _sgf_points(size)
    colours = ("B", "W")
    for i, m in enumerate(moves):
        if not 0 <= m <= nn:
            raise ValueError(f"move {m} is off a {size}x{size} board")
        colour = colours[i & 1]
        if values is not None:
            n = visits[i] if visits is not None else None
            is_full = full is not None and full[i]
            node = f";{colour}[{points[m]}]KGV[{values[i]:.4f}]"
            if n is not None:
                node += f"KGN[{n}]"
            if is_full:
                node += "KGF[1]"
            # Numbers and fixed words only: nothing in it needs escaping.
            node += f"C[{move_comment(colour, values[i], n, is_full)}]"
        else:
            node = f";{colour}[{points[m]}]"
            if visits is not None:
                node += f"KGN[{visits[i]}]"
            if full is not None and full[i]:
                node += "KGF[1]"
        parts.append(node)
    # Short lines keep the file friendly to line-based tools.
    lines, line = [], ""
    for p in parts:
        if len(line) + len(p) > 78:
            lines.append(line)
            line = ""
        line += p
    lines.append(line + ")")
    return "\n".join(lines) + "\n"


def record_to_sgf(record: records_pb2.GameRecord, replay: ReplayResult | None = None) -> str:
    """SGF of a game record, with each move's root value and visit count. ``replay``: the
    record's native replay, whose per-move arrays hold those values (walking the record's
    targets in Python cost as much as the rest of the SGF)."""
    rules = Rules.from_proto(record.rules)
    res = record.result
    winner = {common_pb2.COLOR_BLACK: BLACK, common_pb2.COLOR_WHITE: WHITE}.get(res.winner, 0)
    moves = list(record.moves)
    values: list[float] | None = None
    visits: list[int] | None = None
    full: list[bool] | None = None
    if (
        replay is not None
        and replay.move_values is not None
        and replay.move_visits is not None
        and replay.move_full is not None
        and len(replay.move_values) == len(moves)
    ):
        values = replay.move_values.tolist()
        visits = replay.move_visits.tolist()
        full = replay.move_full.astype(bool).tolist()
    elif len(record.targets) == len(moves):
        targets = list(record.targets)
        values = [t.root_value for t in targets]
        visits = [t.visits for t in targets]
        full = [t.full_search for t in targets]
    return _write(
        record.board_size,
        record.komi,
        rules,
        moves,
        black=record.black_model,
        white=record.white_model,
        result=result_string(winner, res.score, res.resigned),
        values=values,
        visits=visits,
        full=full,
    )


def board_to_sgf(
    board: Board, *, black: str = "", white: str = "", result: str | None = None
) -> str:
    """SGF of the moves played on ``board`` (which must have started empty)."""
    return _write(
        board.size, board.komi, board.rules, board.moves, black=black, white=white, result=result
    )


def game_to_sgf(game: SgfGame, *, handicap: int = 0) -> str:
    """SGF of a position as :func:`parse_sgf` reads it back: setup stones (``AB``/``AW``), the
    player to move first (``PL``, when the setup gives it to white), and every move with its
    own colour, so out-of-turn moves survive (``kgrpc-gtp``'s ``printsgf``). ``handicap``:
    the number of handicap stones (``HA``), 0 for none."""
    from kgrpc import __version__

    rules_name = _RU_NAMES.get(game.rules.name or "", str(game.rules))
    pts = _sgf_points(game.size)
    head = [
        "FF[4]GM[1]CA[UTF-8]",
        f"AP[kgrpc:{_escape(__version__)}]",
        f"SZ[{game.size}]KM[{_format_number(game.komi)}]RU[{_escape(rules_name)}]",
    ]
    if handicap:
        head.append(f"HA[{handicap}]")
    for key, value in (("PB", game.black), ("PW", game.white), ("RE", game.result)):
        if value:
            head.append(f"{key}[{_escape(value)}]")
    for key, points in (("AB", game.setup_black), ("AW", game.setup_white)):
        if points:
            head.append(key + "".join(f"[{pts[p]}]" for p in points))
    if game.first_player == WHITE and (game.setup_black or game.setup_white):
        head.append("PL[W]")
    moves = "".join(f";{'B' if c == BLACK else 'W'}[{pts[m]}]" for c, m in game.moves)
    return "(;" + "".join(head) + moves + ")"


# --------------------------------------------------------------------------- reading


def _parse_tree(text: str) -> list[dict[str, list[str]]]:
    """Nodes of the main line of the first game tree, each {property: [values]}."""
    i, n = 0, len(text)
    start = text.find("(")
    if start < 0:
        raise SgfError("no game tree: '(' not found")
    i = start + 1
    nodes: list[dict[str, list[str]]] = []
    depth = 1
    # Once the first variation of a branch point is finished, everything else is skipped.
    skipping = 0
    node: dict[str, list[str]] | None = None
    ident = ""
    while i < n and depth > 0:
        ch = text[i]
        if ch == "[":
            j = i + 1
            buf = []
            while j < n and text[j] != "]":
                if text[j] == "\\" and j + 1 < n:
                    j += 1
                    if text[j] in "\r\n":  # soft line break
                        if text[j] == "\r" and j + 1 < n and text[j + 1] == "\n":
                            j += 1
                        j += 1
                        continue
                buf.append(text[j])
                j += 1
            if j >= n:
                raise SgfError("unterminated property value")
            if not skipping:
                if node is None or not ident:
                    raise SgfError(f"property value without a property at offset {i}")
                node.setdefault(ident, []).append("".join(buf))
            i = j + 1
            continue
        if ch == "(":
            depth += 1
            i += 1
            continue
        if ch == ")":
            depth -= 1
            # The first variation ended: skip its siblings (and, leaving an enclosing
            # variation, the siblings of that one too).
            if (not skipping and depth > 0) or (skipping and depth < skipping):
                skipping = depth
            i += 1
            continue
        if ch == ";":
            if not skipping:
                node = {}
                nodes.append(node)
            ident = ""
            i += 1
            continue
        if ch.isalpha():
            j = i
            while j < n and text[j].isalpha():
                j += 1
            # FF[3] allowed lowercase letters inside identifiers (e.g. "AddBlack"): drop them.
            ident = "".join(c for c in text[i:j] if c.isupper())
            i = j
            continue
        i += 1
    if not nodes:
        raise SgfError("empty game tree")
    return nodes


@dataclass
class SgfGame:
    size: int
    komi: float
    rules: Rules
    black: str = ""
    white: str = ""
    result: str = ""
    setup_black: list[int] = field(default_factory=list)
    setup_white: list[int] = field(default_factory=list)
    first_player: int = BLACK
    moves: list[tuple[int, int]] = field(default_factory=list)  # (colour, point)
    values: list[float | None] = field(default_factory=list)
    visits: list[int | None] = field(default_factory=list)
    full: list[bool] = field(default_factory=list)


def _rules_from_ru(text: str) -> Rules:
    key = text.strip().lower().replace(" ", "-").replace("_", "-")
    if key in PRESETS:
        return PRESETS[key]
    if key in ("tromptaylor", "tt"):
        return PRESETS["tromp-taylor"]
    # Other rule names (NZ, GOE, Korean...) are area-scored variants: the default fits best.
    return CHINESE


def parse_sgf(text: str) -> SgfGame:
    nodes = _parse_tree(text)
    root = nodes[0]
    try:
        size_text = root.get("SZ", ["19"])[0].split(":")[0]
        size = int(size_text)
    except ValueError:
        raise SgfError(f"bad SZ {root.get('SZ')}") from None
    if not 2 <= size <= 19:
        raise SgfError(f"board size {size} not supported (2..19)")
    if root.get("GM", ["1"])[0].strip() not in ("", "1"):
        raise SgfError("not a game of Go (GM is not 1)")
    try:
        komi = float(root.get("KM", ["0"])[0] or 0)
    except ValueError:
        raise SgfError(f"bad KM {root.get('KM')}") from None
    game = SgfGame(
        size=size,
        komi=komi,
        rules=_rules_from_ru(root["RU"][0]) if "RU" in root else CHINESE,
        black=root.get("PB", [""])[0],
        white=root.get("PW", [""])[0],
        result=root.get("RE", [""])[0],
    )

    def points(values: list[str]) -> list[int]:
        out = []
        for v in values:
            if ":" in v:  # compressed rectangle
                a, b = (from_sgf(x, size) for x in v.split(":"))
                r0, c0 = divmod(a, size)
                r1, c1 = divmod(b, size)
                out += [r * size + c for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)]
            else:
                out.append(from_sgf(v, size))
        return out

    for idx, node in enumerate(nodes):
        if "AB" in node or "AW" in node or "AE" in node:
            if game.moves:
                raise SgfError("setup stones after the first move are not supported")
            game.setup_black += points(node.get("AB", []))
            game.setup_white += points(node.get("AW", []))
        if "PL" in node and not game.moves:
            game.first_player = WHITE if node["PL"][0].strip().upper().startswith("W") else BLACK
        for key, colour in (("B", BLACK), ("W", WHITE)):
            if key in node:
                try:
                    move = from_sgf(node[key][0], size)
                except ValueError as exc:
                    raise SgfError(f"node {idx}: {exc}") from None
                game.moves.append((colour, move))
                try:
                    game.values.append(float(node["KGV"][0]) if "KGV" in node else None)
                    game.visits.append(int(node["KGN"][0]) if "KGN" in node else None)
                except ValueError:
                    raise SgfError(f"node {idx}: bad KGV/KGN value") from None
                game.full.append(node.get("KGF", ["0"])[0] == "1")
    return game


def sgf_to_board(text_or_game: str | SgfGame, max_moves: int | None = None) -> Board:
    """Replay an SGF's main line (optionally only its first ``max_moves`` moves) on a Board.

    Raises SgfError for malformed SGF and kgrpc.go.board.IllegalMoveError for an illegal move.
    """
    game = parse_sgf(text_or_game) if isinstance(text_or_game, str) else text_or_game
    board = Board(game.size, game.rules, game.komi)
    if game.setup_black or game.setup_white or game.first_player != BLACK:
        try:
            board.set_stones(game.setup_black, game.setup_white, game.first_player)
        except ValueError as exc:
            raise SgfError(str(exc)) from None
    moves = game.moves if max_moves is None else game.moves[:max_moves]
    for colour, move in moves:
        if board.is_over():
            # SGF games may continue after two passes (e.g. to remove dead stones).
            board.consecutive_passes = 0
        board.set_to_play(colour)
        board.play(move)
    return board
