"""Reading an UploadGames message: zstd, then the games of a ``GameBatch`` split from the
protobuf wire format without parsing the batch.

A game's serialized size is bounded by its moves (:func:`max_game_bytes`), so a hostile
message costs a bounded number of steps and no memory beyond its decompressed bytes: a few
kilobytes of zstd can expand to millions of empty nested messages, gigabytes once parsed.
Every refusal is a :class:`~kgrpc.coordinator.errors.CoordinatorError` (INVALID_ARGUMENT).
"""

from __future__ import annotations

import io

import zstandard

from kgrpc.coordinator.errors import invalid
from kgrpc.v1 import coordinator_pb2, records_pb2

# A search target holds at most 362 policy entries (about 3 KB even unpacked), a move index
# at most 6 bytes. Anything larger is not a game of at most ``max_moves`` moves.
BYTES_PER_MOVE = 4096
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
                        raise invalid(f"game {len(games)} is {length} bytes, more than a game "
                                      f"of the accepted length takes ({max_bytes_per_game})")
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


def decode_batch(req: coordinator_pb2.UploadGamesRequest, max_bytes: int, max_games: int,
                 max_bytes_per_game: int | None = None) -> list[bytes]:
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


def game_heads(games: list[bytes]) -> list[tuple[str, str] | None]:
    """(game_id, worker_id as the record states it) of each serialized game; None for one
    that does not parse."""
    heads: list[tuple[str, str] | None] = []
    for data in games:
        head = records_pb2.GameRecord()
        try:
            head.MergeFromString(data)
        except Exception:  # noqa: BLE001 - protobuf DecodeError
            heads.append(None)
            continue
        heads.append((head.game_id, head.worker_id))
    return heads
