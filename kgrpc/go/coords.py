"""Move coordinates: point index <-> GTP vertex ("D4", "pass") <-> SGF point ("dp", "" = pass).

Point index = row * N + col, row 0 = the top row, col 0 = the left column; index N*N = pass.
GTP columns are letters A..T skipping I; GTP row 1 is the bottom row (row index N-1).
SGF points are two letters a..s: column then row, row "a" being the top row.
"""

from __future__ import annotations

GTP_COLUMNS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"
_SGF_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _check_size(size: int) -> None:
    if not 2 <= size <= 25:
        raise ValueError(f"board size {size} out of range 2..25")


def to_gtp(move: int, size: int) -> str:
    _check_size(size)
    if move == size * size:
        return "pass"
    if not 0 <= move < size * size:
        raise ValueError(f"move {move} is off a {size}x{size} board")
    row, col = divmod(move, size)
    return f"{GTP_COLUMNS[col]}{size - row}"


def from_gtp(text: str, size: int) -> int:
    _check_size(size)
    t = text.strip().upper()
    if t == "PASS":
        return size * size
    if len(t) < 2 or t[0] not in GTP_COLUMNS[:size] or not t[1:].isdigit():
        raise ValueError(f"bad GTP vertex {text!r} for a {size}x{size} board")
    col = GTP_COLUMNS.index(t[0])
    number = int(t[1:])
    if not 1 <= number <= size:
        raise ValueError(f"bad GTP vertex {text!r}: row {number} is off a {size}x{size} board")
    return (size - number) * size + col


def to_sgf(move: int, size: int) -> str:
    _check_size(size)
    if move == size * size:
        return ""
    if not 0 <= move < size * size:
        raise ValueError(f"move {move} is off a {size}x{size} board")
    row, col = divmod(move, size)
    return _SGF_LETTERS[col] + _SGF_LETTERS[row]


def from_sgf(text: str, size: int) -> int:
    _check_size(size)
    t = text.strip()
    # "tt" is the FF[3] pass, still written by some programs on boards up to 19x19.
    if t == "" or (t == "tt" and size <= 19):
        return size * size
    if len(t) != 2 or t[0] not in _SGF_LETTERS[:size] or t[1] not in _SGF_LETTERS[:size]:
        raise ValueError(f"bad SGF point {text!r} for a {size}x{size} board")
    return _SGF_LETTERS.index(t[1]) * size + _SGF_LETTERS.index(t[0])
