"""Size limits of every string, bytes and repeated field a client can send, in one table.

:data:`FIELDS` maps a field's full protobuf name to the most characters (string), bytes
(bytes) or entries (repeated) it may hold; :func:`check` walks a request and raises
:class:`FieldTooLarge` (the servicers answer INVALID_ARGUMENT naming the field and the limit).
A few fields are bounded by another rule, named in :data:`ELSEWHERE` (the message size limit,
a setting, an exact size the request's counts fix). Fields inside a game record travel
zstd-compressed in ``UploadGamesRequest.games_zstd`` (:data:`EMBEDDED`): the coordinator checks
them on the wire before parsing (:mod:`kgrpc.coordinator.upload`). A test walks the proto
descriptors of every request of every service and fails for a field in neither table.
docs/operations.md lists them all.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

GAME_ID = 36  # a UUID; shards store game ids as numpy "<U36"
WORKER_ID = 64  # "w-" + 16 hex digits, or an upload bucket ("token-<id>", "anonymous")
TASK_ID = 128
MODEL_NAME = 200  # {series}-b{blocks}c{channels}-s{steps}-d{rows}: at most 135 characters
LABEL = 256  # free text shown in statistics: user and host names, versions
SHA256_HEX = 64
RUN = 128
FILE_NAME = 128
OPPONENT = 64  # a rating's reference engine ("random", "first", "gnugo-l1", an operator's name)
MATCH_GAMES = 1000  # games in one ReportMatchResult (a match task hands out tens)
# One SearchTarget and one GameResult of a game record, serialized: a 19x19 policy (362
# entries) or ownership (361) takes under 3 KB even without packing.
TARGET_BYTES = 4096
RESULT_BYTES = 4096

# Replies: ratings in one ListRatings reply (a larger `limit` is cut to this) and in one
# GetStats reply (the most recently reported).
RATINGS_PER_LIST = 10_000
RATINGS_PER_STATS = 2_000
# GetStats lists workers, models and gating matches a page at a time: this many when the
# request's limit is 0, at most STATS_MAX_PAGE.
STATS_PAGE = 100
STATS_MAX_PAGE = 1000


def stats_page(limit: int) -> int:
    """The page size GetStats uses for a requested ``limit`` (0: the default)."""
    return min(limit or STATS_PAGE, STATS_MAX_PAGE) if limit >= 0 else STATS_PAGE


_R = "kgrpc.v1."
FIELDS: dict[str, int] = {
    # Coordinator
    _R + "RegisterRequest.username": LABEL,
    _R + "RegisterRequest.hostname": LABEL,
    _R + "RegisterRequest.version": LABEL,
    _R + "RegisterRequest.previous_worker_id": WORKER_ID,
    _R + "HeartbeatRequest.worker_id": WORKER_ID,
    _R + "WorkerStats.current_model": MODEL_NAME,
    _R + "GetTaskRequest.worker_id": WORKER_ID,
    _R + "DownloadModelRequest.name": MODEL_NAME,
    _R + "WatchModelsRequest.known_model": MODEL_NAME,
    _R + "PublishHeader.name": MODEL_NAME,
    _R + "PublishHeader.sha256": SHA256_HEX,
    _R + "ReportMatchResultRequest.task_id": TASK_ID,
    _R + "ReportMatchResultRequest.worker_id": WORKER_ID,
    _R + "ReportMatchResultRequest.candidate_model": MODEL_NAME,
    _R + "ReportMatchResultRequest.reference_model": MODEL_NAME,
    _R + "ReportMatchResultRequest.games": MATCH_GAMES,
    _R + "MatchGame.game_id": GAME_ID,
    _R + "ListShardsRequest.run": RUN,
    _R + "DownloadShardRequest.run": RUN,
    _R + "DownloadShardRequest.file_name": FILE_NAME,
    _R + "ListGamesRequest.model": MODEL_NAME,
    _R + "ReportRatingRequest.model": MODEL_NAME,
    _R + "ReportRatingRequest.opponent": OPPONENT,
    _R + "ListRatingsRequest.model": MODEL_NAME,
    _R + "ListRatingsRequest.opponent": OPPONENT,
    _R + "DownloadGameRequest.game_id": GAME_ID,
    # A game record (inside games_zstd; checked on the wire by kgrpc.coordinator.upload)
    _R + "GameRecord.game_id": GAME_ID,
    _R + "GameRecord.black_model": MODEL_NAME,
    _R + "GameRecord.white_model": MODEL_NAME,
    _R + "GameRecord.worker_id": WORKER_ID,
    _R + "GameRecord.task_id": TASK_ID,
    # Inference
    _R + "EvalRequest.model": MODEL_NAME,
}

ELSEWHERE: dict[str, str] = {
    _R + "UploadGamesRequest.games_zstd": "the message size limit (max_receive_mb); decompressed, "
    "max_decompressed_mb",
    _R + "PublishModelRequest.data": "the message size limit (max_receive_mb); the whole model, 16 "
    "times that",
    _R + "GameBatch.games": "max_games_per_message (counted on the wire before parsing)",
    _R + "GameRecord.moves": "max_moves (counted on the wire before parsing)",
    _R
    + "GameRecord.targets": f"one per move, max_moves; each at most {TARGET_BYTES} bytes (on the "
    f"wire)",
    _R + "SearchTarget.policy_moves": "N*N+1 (validation); the target's bytes, on the wire",
    _R + "SearchTarget.policy_probs": "N*N+1 (validation); the target's bytes, on the wire",
    _R
    + "GameResult.ownership": f"N*N (validation); the result at most {RESULT_BYTES} bytes (on the "
    f"wire)",
    _R + "EvalRequest.planes": "exactly count * packed_row_bytes(N) bytes, count <= 4096",
    _R + "EvalRequest.globals": "exactly count * NUM_GLOBALS * 4 bytes, count <= 4096",
}

# Bytes fields that carry a serialized message, and its type.
EMBEDDED: dict[str, str] = {_R + "UploadGamesRequest.games_zstd": _R + "GameBatch"}

_SIZED = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


class FieldTooLarge(ValueError):
    """A field over its limit; the message names the field, its size and the limit."""

    def __init__(self, field: str, size: int, limit: int, unit: str) -> None:
        super().__init__(f"{field} has {size} {unit}; the limit is {limit}")
        self.field = field
        self.size = size
        self.limit = limit


def _unit(f: FieldDescriptor) -> str:
    if f.is_repeated:
        return "entries"
    return "characters" if f.type == FieldDescriptor.TYPE_STRING else "bytes"


def check(msg: Message) -> None:
    """Raise :class:`FieldTooLarge` for the first field of ``msg`` (nested messages
    included) over its limit in :data:`FIELDS`."""
    for f, value in msg.ListFields():
        limit = FIELDS.get(f.full_name)
        if limit is not None and (f.is_repeated or f.type in _SIZED) and len(value) > limit:
            raise FieldTooLarge(f.full_name.removeprefix(_R), len(value), limit, _unit(f))
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            for item in value if f.is_repeated else (value,):
                check(item)
