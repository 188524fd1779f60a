"""Reading an UploadGames message: zstd, then the games of a ``GameBatch`` split from the
protobuf wire format without parsing the batch, then each game's fields checked from the
wire format without parsing the game (:func:`scan_game`).

Decompression reads chunks up to ``max_decompressed_mb`` (:class:`Inflater`): a refused bomb
never costs its expansion. A game's serialized size is bounded by its moves
(:func:`max_game_bytes`), and the scan stops at the first field over a limit, so a hostile
message costs a bounded number of steps: a few kilobytes of zstd can expand to millions of
empty nested messages, gigabytes once parsed. A malformed message is a
:class:`~kgrpc.coordinator.errors.CoordinatorError` (INVALID_ARGUMENT); a malformed game is
refused on its own (:class:`GameHead` ``problem``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import zstandard

from kgrpc.coordinator.errors import invalid
from kgrpc.net import limits
from kgrpc.records.errors import move_label
from kgrpc.v1 import coordinator_pb2

# A search target holds at most 362 policy entries (about 3 KB even unpacked), a move index
# at most 6 bytes. Anything larger is not a game of at most ``max_moves`` moves.
BYTES_PER_MOVE = limits.TARGET_BYTES
BYTES_PER_GAME = 64 * 1024
# Decompressed bytes read at a time (:class:`Inflater`).
CHUNK = 256 * 1024


def max_game_bytes(max_moves: int) -> int:
    """The largest serialized GameRecord of at most ``max_moves`` moves."""
    return max_moves * BYTES_PER_MOVE + BYTES_PER_GAME


class Inflater:
    """The decompressed bytes of a zstd payload, read in chunks of :data:`CHUNK` bytes: at most
    ``limit`` bytes are ever decompressed (past that, INVALID_ARGUMENT), and bytes once
    consumed are not kept, so a refused bomb costs one chunk of memory, never its expansion.
    Concatenated frames are one stream (what ``zstd`` and streaming compressors in other
    languages may produce). Reads raise ValueError at the end of the data and
    ``zstandard.ZstdError`` for bytes that are not zstd."""

    def __init__(self, payload: bytes, limit: int) -> None:
        self._reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(payload), read_across_frames=True
        )
        self.limit = limit
        self.total = 0  # decompressed bytes read so far
        self._buf = b""
        self._pos = 0

    def _more(self) -> bool:
        chunk = self._reader.read(CHUNK)
        if not chunk:
            return False
        self.total += len(chunk)
        if self.total > self.limit:
            self._buf = b""
            raise invalid(f"decompressed batch exceeds {self.limit} bytes")
        self._buf, self._pos = chunk, 0
        return True

    def at_end(self) -> bool:
        return self._pos >= len(self._buf) and not self._more()

    def varint(self) -> int:
        result = shift = 0
        while shift < 64:
            if self._pos >= len(self._buf) and not self._more():
                raise ValueError("truncated varint")
            b = self._buf[self._pos]
            self._pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
        raise ValueError("varint longer than 10 bytes")

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        parts: list[bytes] = []
        while n > 0:
            if self._pos >= len(self._buf) and not self._more():
                raise ValueError("truncated field")
            take = min(n, len(self._buf) - self._pos)
            parts.append(self._buf[self._pos : self._pos + take])
            self._pos += take
            n -= take
        return b"".join(parts)

    def skip(self, n: int) -> None:
        while n > 0:
            if self._pos >= len(self._buf) and not self._more():
                raise ValueError("truncated field")
            take = min(n, len(self._buf) - self._pos)
            self._pos += take
            n -= take


def split_stream(src: Inflater, max_games: int, max_bytes_per_game: int) -> list[bytes]:
    """The serialized games of a ``GameBatch`` (field 1), read from the wire format without
    parsing them; at most ``max_games`` top-level fields and ``max_bytes_per_game`` per game
    (refused before the game is read), so a hostile batch costs a bounded number of steps
    and no memory beyond the games it holds."""
    games: list[bytes] = []
    fields = 0
    not_a_batch = "games_zstd does not decode to a GameBatch"
    while not src.at_end():
        fields += 1
        if fields > max_games:
            raise invalid(f"more than {max_games} games in one message")
        try:
            key = src.varint()
            wire, number = key & 7, key >> 3
            if number == 0:
                raise ValueError("field number 0")
            if wire == 2:
                length = src.varint()
                if number == 1:
                    if length > max_bytes_per_game:
                        raise invalid(
                            f"game {len(games) + 1} of the message is {length} bytes, "
                            "more than a game "
                            f"of the accepted length takes ({max_bytes_per_game})"
                        )
                    games.append(src.read(length))
                else:
                    src.skip(length)  # other fields: unknown, skipped as protobuf would
            elif number == 1:
                raise invalid(f"{not_a_batch}: field 1 is not length-delimited")
            elif wire == 0:
                src.varint()
            elif wire in (1, 5):
                src.skip(8 if wire == 1 else 4)
            else:
                raise ValueError(f"wire type {wire}")
        except ValueError as exc:
            raise invalid(f"{not_a_batch}: {exc}") from None
    return games


def decode_batch(
    req: coordinator_pb2.UploadGamesRequest,
    max_bytes: int,
    max_games: int,
    max_bytes_per_game: int | None = None,
) -> list[bytes]:
    """Decompress and split an upload message into serialized games (INVALID_ARGUMENT on
    bad input). At most ``max_bytes`` are decompressed, one chunk at a time."""
    if req.game_count <= 0:
        raise invalid(f"game_count must be positive, got {req.game_count}")
    if req.game_count > max_games:
        raise invalid(f"{req.game_count} games in one message; at most {max_games}")
    per_game = max_bytes if max_bytes_per_game is None else max_bytes_per_game
    try:
        games = split_stream(Inflater(req.games_zstd, max_bytes), max_games, per_game)
    except zstandard.ZstdError as exc:
        raise invalid(f"games_zstd is not valid zstd data: {exc}") from None
    if len(games) != req.game_count:
        count = len(games)
        del games  # a refusal keeps nothing alive, not even through its traceback
        raise invalid(f"game_count says {req.game_count} but the batch holds {count} games")
    return games


@dataclass(frozen=True)
class GameHead:
    """What the coordinator reads from a serialized game before parsing it: its id, worker
    id and task id, its moves, and a ``(reason, detail)`` refusal when a field is over its
    limit."""

    game_id: str
    worker_id: str
    moves: int
    problem: tuple[str, str] | None = None
    task_id: str = ""


# Fields of a GameRecord checked on the wire: number -> (name, limit in characters).
_STRINGS = {
    1: ("game_id", limits.GAME_ID),
    5: ("black_model", limits.MODEL_NAME),
    6: ("white_model", limits.MODEL_NAME),
    10: ("worker_id", limits.WORKER_ID),
    11: ("task_id", limits.TASK_ID),
}
_MOVES, _TARGETS, _RESULT = 7, 8, 9
# Bytes below 0x80: the last byte of each varint (counting a packed field's entries).
_LAST_BYTES = bytes(range(0x80))


def _varint_at(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 64:
        b = data[pos]  # IndexError past the end
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def scan_game(data: bytes, max_moves: int) -> GameHead:
    """Read a serialized GameRecord's top-level fields from the wire, without parsing it:
    moves (a packed field's entries counted), one search target per move (each at most
    ``TARGET_BYTES``), the result (at most ``RESULT_BYTES``) and every string against
    :data:`kgrpc.net.limits.FIELDS`. Work stops at the first field over a limit, so a game
    costs at most about ``2 * max_moves`` steps whatever it holds. Refusals use the
    validation's reason codes (``too_long``, ``targets_mismatch``, ``bad_game_id``,
    ``policy_invalid``, ``undecodable``) or ``field_too_long``."""
    strings: dict[int, bytes] = {}
    moves = targets = fields = 0
    max_fields = 2 * max_moves + 64
    pos, end = 0, len(data)
    problem: tuple[str, str] | None = None
    try:
        while pos < end:
            fields += 1
            if fields > max_fields:
                problem = ("field_too_long", f"more than {max_fields} fields in one game")
                break
            key = data[pos]
            if key < 0x80:
                pos += 1
            else:
                key, pos = _varint_at(data, pos)
            number = key >> 3
            wire = key & 7
            if wire == 2:
                n = data[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = _varint_at(data, pos)
                start = pos
                pos += n
                if pos > end:
                    raise ValueError("truncated field")
                if number == _TARGETS:
                    targets += 1
                    if n > limits.TARGET_BYTES:
                        problem = (
                            "policy_invalid",
                            f"the search target of {move_label(targets - 1)} is {n} bytes; "
                            f"at most {limits.TARGET_BYTES}",
                        )
                        break
                    if targets > max_moves:
                        break
                elif number == _MOVES:
                    moves += n - len(data[start:pos].translate(None, _LAST_BYTES))
                elif number in _STRINGS:
                    name, limit = _STRINGS[number]
                    if n > 4 * limit:  # UTF-8: at most 4 bytes a character
                        problem = _too_long(name, limit, n)
                        break
                    strings[number] = data[start:pos]  # the last one counts, as in protobuf
                elif number == _RESULT and n > limits.RESULT_BYTES:
                    problem = (
                        "field_too_long",
                        f"result is {n} bytes; at most {limits.RESULT_BYTES}",
                    )
                    break
            elif wire == 0:
                _, pos = _varint_at(data, pos)
                moves += number == _MOVES
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                raise ValueError(f"wire type {wire}")
            if number == 0 or pos > end:
                raise ValueError("truncated field" if number else "field number 0")
        text = {k: v.decode() for k, v in strings.items()}
    except (ValueError, IndexError) as exc:  # UnicodeDecodeError is a ValueError
        return GameHead("", "", 0, ("undecodable", f"game record does not parse: {exc}"))
    game_id = text.get(1, "")
    if problem is None:
        for number, (name, limit) in _STRINGS.items():
            if len(text.get(number, "")) > limit:
                problem = _too_long(name, limit, len(text[number]))
                break
    if problem is None and max(moves, targets) > max_moves:
        problem = ("too_long", f"more than {max_moves} moves")
    if problem is None and targets != moves:
        problem = ("targets_mismatch", f"{moves} moves but {targets} search targets")
    if problem is not None and problem[0] == "bad_game_id":
        game_id = ""  # not echoed in the ack
    return GameHead(game_id, text.get(10, ""), moves, problem, text.get(11, ""))


def _too_long(name: str, limit: int, size: int) -> tuple[str, str]:
    reason = "bad_game_id" if name == "game_id" else "field_too_long"
    return reason, f"{name} is longer than {limit} characters ({size})"
