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


def max_game_bytes(max_moves: int) -> int:
    """The largest serialized GameRecord of at most ``max_moves`` moves."""
    return max_moves * BYTES_PER_MOVE + BYTES_PER_GAME


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the protobuf varint at ``buf[pos]``; ValueError when
    it is truncated or longer than 10 bytes."""
    result = shift = 0
    while shift < 64:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def split_batch(raw: bytes, max_games: int, max_bytes_per_game: int) -> list[bytes]:
    """The serialized games of a ``GameBatch`` (field 1), read from the wire format without
    parsing them; at most ``max_games`` top-level fields and ``max_bytes_per_game`` per game,
    so a hostile batch costs a bounded number of steps and no memory beyond its bytes."""
    games: list[bytes] = []
    pos = fields = 0
    not_a_batch = "games_zstd does not decode to a GameBatch"
    while pos < len(raw):
        fields += 1
        if fields > max_games:
            raise invalid(f"more than {max_games} games in one message")
        try:
            key, pos = read_varint(raw, pos)
            wire = key & 7
            if wire == 0:
                _, pos = read_varint(raw, pos)
                end = pos
            elif wire == 1:
                end = pos + 8
            elif wire == 5:
                end = pos + 4
            elif wire == 2:
                length, pos = read_varint(raw, pos)
                end = pos + length
            else:
                raise ValueError(f"wire type {wire}")
            if end > len(raw) or key >> 3 == 0:
                raise ValueError("truncated field")
        except ValueError as exc:
            raise invalid(f"{not_a_batch}: {exc}") from None
        if key >> 3 == 1:
            if wire != 2:
                raise invalid(f"{not_a_batch}: field 1 is not length-delimited")
            if end - pos > max_bytes_per_game:
                raise invalid(f"game {len(games)} is {end - pos} bytes, more than a game of the "
                              f"accepted length takes ({max_bytes_per_game})")
            games.append(raw[pos:end])
        pos = end  # other fields: unknown, skipped as protobuf would
    return games


def decode_batch(req: coordinator_pb2.UploadGamesRequest, max_bytes: int, max_games: int,
                 max_bytes_per_game: int | None = None) -> list[bytes]:
    """Decompress and split an upload message into serialized games (INVALID_ARGUMENT on
    bad input)."""
    if req.game_count <= 0:
        raise invalid(f"game_count must be positive, got {req.game_count}")
    if req.game_count > max_games:
        raise invalid(f"{req.game_count} games in one message; at most {max_games}")
    try:
        # Across frames: concatenated zstd frames are one stream (what `zstd` and streaming
        # compressors in other languages may produce); without it only the first is read.
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(req.games_zstd), read_across_frames=True
        )
        raw = reader.read(max_bytes + 1)
    except zstandard.ZstdError as exc:
        raise invalid(f"games_zstd is not valid zstd data: {exc}") from None
    if len(raw) > max_bytes:
        raise invalid(f"decompressed batch exceeds {max_bytes} bytes")
    per_game = max_bytes if max_bytes_per_game is None else max_bytes_per_game
    games = split_batch(raw, max_games, per_game)
    if len(games) != req.game_count:
        raise invalid(f"game_count says {req.game_count} but the batch holds {len(games)} games")
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
