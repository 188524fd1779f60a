from kgrpc.v1 import common_pb2 as _common_pb2
from kgrpc.v1 import records_pb2 as _records_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GameStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GAME_STATUS_UNSPECIFIED: _ClassVar[GameStatus]
    GAME_STATUS_ACCEPTED: _ClassVar[GameStatus]
    GAME_STATUS_DUPLICATE: _ClassVar[GameStatus]
    GAME_STATUS_REJECTED: _ClassVar[GameStatus]

class GameKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GAME_KIND_UNSPECIFIED: _ClassVar[GameKind]
    GAME_KIND_SELFPLAY: _ClassVar[GameKind]
    GAME_KIND_GATING: _ClassVar[GameKind]
GAME_STATUS_UNSPECIFIED: GameStatus
GAME_STATUS_ACCEPTED: GameStatus
GAME_STATUS_DUPLICATE: GameStatus
GAME_STATUS_REJECTED: GameStatus
GAME_KIND_UNSPECIFIED: GameKind
GAME_KIND_SELFPLAY: GameKind
GAME_KIND_GATING: GameKind

class RegisterRequest(_message.Message):
    __slots__ = ("username", "hostname", "version", "parallel_games", "previous_worker_id")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_GAMES_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    username: str
    hostname: str
    version: str
    parallel_games: int
    previous_worker_id: str
    def __init__(self, username: _Optional[str] = ..., hostname: _Optional[str] = ..., version: _Optional[str] = ..., parallel_games: _Optional[int] = ..., previous_worker_id: _Optional[str] = ...) -> None: ...

class SelfPlaySettings(_message.Message):
    __slots__ = ("games_per_batch", "full_search_prob", "cheap_visits", "temperature_moves_19", "dirichlet_alpha_19", "noise_fraction", "resign_threshold", "resign_playout_fraction", "max_moves_per_point", "forced_playouts_k", "score_utility_factor", "opening_policy_prob", "opening_moves_19", "opening_temperature", "gumbel", "gumbel_considered", "gumbel_c_visit", "gumbel_c_scale")
    GAMES_PER_BATCH_FIELD_NUMBER: _ClassVar[int]
    FULL_SEARCH_PROB_FIELD_NUMBER: _ClassVar[int]
    CHEAP_VISITS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_MOVES_19_FIELD_NUMBER: _ClassVar[int]
    DIRICHLET_ALPHA_19_FIELD_NUMBER: _ClassVar[int]
    NOISE_FRACTION_FIELD_NUMBER: _ClassVar[int]
    RESIGN_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    RESIGN_PLAYOUT_FRACTION_FIELD_NUMBER: _ClassVar[int]
    MAX_MOVES_PER_POINT_FIELD_NUMBER: _ClassVar[int]
    FORCED_PLAYOUTS_K_FIELD_NUMBER: _ClassVar[int]
    SCORE_UTILITY_FACTOR_FIELD_NUMBER: _ClassVar[int]
    OPENING_POLICY_PROB_FIELD_NUMBER: _ClassVar[int]
    OPENING_MOVES_19_FIELD_NUMBER: _ClassVar[int]
    OPENING_TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    GUMBEL_FIELD_NUMBER: _ClassVar[int]
    GUMBEL_CONSIDERED_FIELD_NUMBER: _ClassVar[int]
    GUMBEL_C_VISIT_FIELD_NUMBER: _ClassVar[int]
    GUMBEL_C_SCALE_FIELD_NUMBER: _ClassVar[int]
    games_per_batch: int
    full_search_prob: float
    cheap_visits: int
    temperature_moves_19: int
    dirichlet_alpha_19: float
    noise_fraction: float
    resign_threshold: float
    resign_playout_fraction: float
    max_moves_per_point: float
    forced_playouts_k: float
    score_utility_factor: float
    opening_policy_prob: float
    opening_moves_19: float
    opening_temperature: float
    gumbel: bool
    gumbel_considered: int
    gumbel_c_visit: float
    gumbel_c_scale: float
    def __init__(self, games_per_batch: _Optional[int] = ..., full_search_prob: _Optional[float] = ..., cheap_visits: _Optional[int] = ..., temperature_moves_19: _Optional[int] = ..., dirichlet_alpha_19: _Optional[float] = ..., noise_fraction: _Optional[float] = ..., resign_threshold: _Optional[float] = ..., resign_playout_fraction: _Optional[float] = ..., max_moves_per_point: _Optional[float] = ..., forced_playouts_k: _Optional[float] = ..., score_utility_factor: _Optional[float] = ..., opening_policy_prob: _Optional[float] = ..., opening_moves_19: _Optional[float] = ..., opening_temperature: _Optional[float] = ..., gumbel: _Optional[bool] = ..., gumbel_considered: _Optional[int] = ..., gumbel_c_visit: _Optional[float] = ..., gumbel_c_scale: _Optional[float] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("worker_id", "settings", "heartbeat_interval_s")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    settings: SelfPlaySettings
    heartbeat_interval_s: int
    def __init__(self, worker_id: _Optional[str] = ..., settings: _Optional[_Union[SelfPlaySettings, _Mapping]] = ..., heartbeat_interval_s: _Optional[int] = ...) -> None: ...

class WorkerStats(_message.Message):
    __slots__ = ("games_finished", "games_uploaded", "moves_played", "moves_per_s", "visits_per_s", "nn_evals_per_s", "mean_batch_size", "current_model", "spooled_games")
    GAMES_FINISHED_FIELD_NUMBER: _ClassVar[int]
    GAMES_UPLOADED_FIELD_NUMBER: _ClassVar[int]
    MOVES_PLAYED_FIELD_NUMBER: _ClassVar[int]
    MOVES_PER_S_FIELD_NUMBER: _ClassVar[int]
    VISITS_PER_S_FIELD_NUMBER: _ClassVar[int]
    NN_EVALS_PER_S_FIELD_NUMBER: _ClassVar[int]
    MEAN_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_MODEL_FIELD_NUMBER: _ClassVar[int]
    SPOOLED_GAMES_FIELD_NUMBER: _ClassVar[int]
    games_finished: int
    games_uploaded: int
    moves_played: int
    moves_per_s: float
    visits_per_s: float
    nn_evals_per_s: float
    mean_batch_size: float
    current_model: str
    spooled_games: int
    def __init__(self, games_finished: _Optional[int] = ..., games_uploaded: _Optional[int] = ..., moves_played: _Optional[int] = ..., moves_per_s: _Optional[float] = ..., visits_per_s: _Optional[float] = ..., nn_evals_per_s: _Optional[float] = ..., mean_batch_size: _Optional[float] = ..., current_model: _Optional[str] = ..., spooled_games: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "stats")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    stats: WorkerStats
    def __init__(self, worker_id: _Optional[str] = ..., stats: _Optional[_Union[WorkerStats, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("latest_model", "heartbeat_interval_s")
    LATEST_MODEL_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    latest_model: str
    heartbeat_interval_s: int
    def __init__(self, latest_model: _Optional[str] = ..., heartbeat_interval_s: _Optional[int] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class SelfPlayTask(_message.Message):
    __slots__ = ("model", "games")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GAMES_FIELD_NUMBER: _ClassVar[int]
    model: str
    games: int
    def __init__(self, model: _Optional[str] = ..., games: _Optional[int] = ...) -> None: ...

class MatchTask(_message.Message):
    __slots__ = ("candidate_model", "reference_model", "games")
    CANDIDATE_MODEL_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_MODEL_FIELD_NUMBER: _ClassVar[int]
    GAMES_FIELD_NUMBER: _ClassVar[int]
    candidate_model: str
    reference_model: str
    games: int
    def __init__(self, candidate_model: _Optional[str] = ..., reference_model: _Optional[str] = ..., games: _Optional[int] = ...) -> None: ...

class KomiRange(_message.Message):
    __slots__ = ("low", "high", "step")
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    low: float
    high: float
    step: float
    def __init__(self, low: _Optional[float] = ..., high: _Optional[float] = ..., step: _Optional[float] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "rules", "komi", "board_size", "visits", "selfplay", "match", "retry_after_s", "max_moves", "komi_range")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    KOMI_FIELD_NUMBER: _ClassVar[int]
    BOARD_SIZE_FIELD_NUMBER: _ClassVar[int]
    VISITS_FIELD_NUMBER: _ClassVar[int]
    SELFPLAY_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    MAX_MOVES_FIELD_NUMBER: _ClassVar[int]
    KOMI_RANGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    rules: _common_pb2.Rules
    komi: float
    board_size: int
    visits: int
    selfplay: SelfPlayTask
    match: MatchTask
    retry_after_s: int
    max_moves: int
    komi_range: KomiRange
    def __init__(self, task_id: _Optional[str] = ..., rules: _Optional[_Union[_common_pb2.Rules, _Mapping]] = ..., komi: _Optional[float] = ..., board_size: _Optional[int] = ..., visits: _Optional[int] = ..., selfplay: _Optional[_Union[SelfPlayTask, _Mapping]] = ..., match: _Optional[_Union[MatchTask, _Mapping]] = ..., retry_after_s: _Optional[int] = ..., max_moves: _Optional[int] = ..., komi_range: _Optional[_Union[KomiRange, _Mapping]] = ...) -> None: ...

class UploadGamesRequest(_message.Message):
    __slots__ = ("games_zstd", "game_count")
    GAMES_ZSTD_FIELD_NUMBER: _ClassVar[int]
    GAME_COUNT_FIELD_NUMBER: _ClassVar[int]
    games_zstd: bytes
    game_count: int
    def __init__(self, games_zstd: _Optional[bytes] = ..., game_count: _Optional[int] = ...) -> None: ...

class GameAck(_message.Message):
    __slots__ = ("game_id", "status", "reason", "detail")
    GAME_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    game_id: str
    status: GameStatus
    reason: str
    detail: str
    def __init__(self, game_id: _Optional[str] = ..., status: _Optional[_Union[GameStatus, str]] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class UploadGamesResponse(_message.Message):
    __slots__ = ("acks", "accepted", "duplicates", "rejected")
    ACKS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[GameAck]
    accepted: int
    duplicates: int
    rejected: int
    def __init__(self, acks: _Optional[_Iterable[_Union[GameAck, _Mapping]]] = ..., accepted: _Optional[int] = ..., duplicates: _Optional[int] = ..., rejected: _Optional[int] = ...) -> None: ...

class GetLatestModelRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetLatestModelResponse(_message.Message):
    __slots__ = ("found", "model")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    found: bool
    model: _common_pb2.ModelInfo
    def __init__(self, found: _Optional[bool] = ..., model: _Optional[_Union[_common_pb2.ModelInfo, _Mapping]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[_common_pb2.ModelInfo, _Mapping]]] = ...) -> None: ...

class DownloadModelRequest(_message.Message):
    __slots__ = ("name", "offset", "precision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    offset: int
    precision: _common_pb2.Precision
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., precision: _Optional[_Union[_common_pb2.Precision, str]] = ...) -> None: ...

class ModelChunk(_message.Message):
    __slots__ = ("info", "offset", "data", "file")
    INFO_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    info: _common_pb2.ModelInfo
    offset: int
    data: bytes
    file: _common_pb2.ModelFile
    def __init__(self, info: _Optional[_Union[_common_pb2.ModelInfo, _Mapping]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., file: _Optional[_Union[_common_pb2.ModelFile, _Mapping]] = ...) -> None: ...

class WatchModelsRequest(_message.Message):
    __slots__ = ("known_model",)
    KNOWN_MODEL_FIELD_NUMBER: _ClassVar[int]
    known_model: str
    def __init__(self, known_model: _Optional[str] = ...) -> None: ...

class ModelRelease(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelInfo
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelInfo, _Mapping]] = ...) -> None: ...

class PublishHeader(_message.Message):
    __slots__ = ("name", "sha256", "size_bytes", "blocks", "channels", "training_steps", "training_rows", "feature_version", "precision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_STEPS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_ROWS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    sha256: str
    size_bytes: int
    blocks: int
    channels: int
    training_steps: int
    training_rows: int
    feature_version: int
    precision: _common_pb2.Precision
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., blocks: _Optional[int] = ..., channels: _Optional[int] = ..., training_steps: _Optional[int] = ..., training_rows: _Optional[int] = ..., feature_version: _Optional[int] = ..., precision: _Optional[_Union[_common_pb2.Precision, str]] = ...) -> None: ...

class PublishModelRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: PublishHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[PublishHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class PublishModelResponse(_message.Message):
    __slots__ = ("model", "gating_scheduled")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GATING_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelInfo
    gating_scheduled: bool
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelInfo, _Mapping]] = ..., gating_scheduled: _Optional[bool] = ...) -> None: ...

class MatchGame(_message.Message):
    __slots__ = ("game_id", "candidate_color", "winner", "score", "moves", "record")
    GAME_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_COLOR_FIELD_NUMBER: _ClassVar[int]
    WINNER_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    game_id: str
    candidate_color: _common_pb2.Color
    winner: _common_pb2.Color
    score: float
    moves: int
    record: _records_pb2.GameRecord
    def __init__(self, game_id: _Optional[str] = ..., candidate_color: _Optional[_Union[_common_pb2.Color, str]] = ..., winner: _Optional[_Union[_common_pb2.Color, str]] = ..., score: _Optional[float] = ..., moves: _Optional[int] = ..., record: _Optional[_Union[_records_pb2.GameRecord, _Mapping]] = ...) -> None: ...

class ReportMatchResultRequest(_message.Message):
    __slots__ = ("task_id", "worker_id", "candidate_model", "reference_model", "games")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_MODEL_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_MODEL_FIELD_NUMBER: _ClassVar[int]
    GAMES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    worker_id: str
    candidate_model: str
    reference_model: str
    games: _containers.RepeatedCompositeFieldContainer[MatchGame]
    def __init__(self, task_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., candidate_model: _Optional[str] = ..., reference_model: _Optional[str] = ..., games: _Optional[_Iterable[_Union[MatchGame, _Mapping]]] = ...) -> None: ...

class ReportMatchResultResponse(_message.Message):
    __slots__ = ("games_recorded", "decision")
    GAMES_RECORDED_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    games_recorded: int
    decision: str
    def __init__(self, games_recorded: _Optional[int] = ..., decision: _Optional[str] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ("workers_offset", "workers_limit", "models_offset", "models_limit", "matches_offset", "matches_limit")
    WORKERS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WORKERS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MODELS_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MODELS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MATCHES_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MATCHES_LIMIT_FIELD_NUMBER: _ClassVar[int]
    workers_offset: int
    workers_limit: int
    models_offset: int
    models_limit: int
    matches_offset: int
    matches_limit: int
    def __init__(self, workers_offset: _Optional[int] = ..., workers_limit: _Optional[int] = ..., models_offset: _Optional[int] = ..., models_limit: _Optional[int] = ..., matches_offset: _Optional[int] = ..., matches_limit: _Optional[int] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker_id", "username", "hostname", "last_heartbeat_unix_ms", "games_accepted", "games_rejected", "rejects_by_reason", "stats", "display_name")
    class RejectsByReasonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    GAMES_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    GAMES_REJECTED_FIELD_NUMBER: _ClassVar[int]
    REJECTS_BY_REASON_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    username: str
    hostname: str
    last_heartbeat_unix_ms: int
    games_accepted: int
    games_rejected: int
    rejects_by_reason: _containers.ScalarMap[str, int]
    stats: WorkerStats
    display_name: str
    def __init__(self, worker_id: _Optional[str] = ..., username: _Optional[str] = ..., hostname: _Optional[str] = ..., last_heartbeat_unix_ms: _Optional[int] = ..., games_accepted: _Optional[int] = ..., games_rejected: _Optional[int] = ..., rejects_by_reason: _Optional[_Mapping[str, int]] = ..., stats: _Optional[_Union[WorkerStats, _Mapping]] = ..., display_name: _Optional[str] = ...) -> None: ...

class MatchSummary(_message.Message):
    __slots__ = ("candidate_model", "reference_model", "wins", "losses", "draws", "elo_diff", "elo_low", "elo_high", "decision", "tokens", "waiting", "set_aside", "recount")
    CANDIDATE_MODEL_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_MODEL_FIELD_NUMBER: _ClassVar[int]
    WINS_FIELD_NUMBER: _ClassVar[int]
    LOSSES_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    ELO_DIFF_FIELD_NUMBER: _ClassVar[int]
    ELO_LOW_FIELD_NUMBER: _ClassVar[int]
    ELO_HIGH_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    SET_ASIDE_FIELD_NUMBER: _ClassVar[int]
    RECOUNT_FIELD_NUMBER: _ClassVar[int]
    candidate_model: str
    reference_model: str
    wins: int
    losses: int
    draws: int
    elo_diff: float
    elo_low: float
    elo_high: float
    decision: str
    tokens: int
    waiting: str
    set_aside: _containers.RepeatedCompositeFieldContainer[SetAsideToken]
    recount: str
    def __init__(self, candidate_model: _Optional[str] = ..., reference_model: _Optional[str] = ..., wins: _Optional[int] = ..., losses: _Optional[int] = ..., draws: _Optional[int] = ..., elo_diff: _Optional[float] = ..., elo_low: _Optional[float] = ..., elo_high: _Optional[float] = ..., decision: _Optional[str] = ..., tokens: _Optional[int] = ..., waiting: _Optional[str] = ..., set_aside: _Optional[_Iterable[_Union[SetAsideToken, _Mapping]]] = ..., recount: _Optional[str] = ...) -> None: ...

class SetAsideToken(_message.Message):
    __slots__ = ("token_id", "why", "wins", "losses", "draws", "others_wins", "others_games", "p_value")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    WINS_FIELD_NUMBER: _ClassVar[int]
    LOSSES_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    OTHERS_WINS_FIELD_NUMBER: _ClassVar[int]
    OTHERS_GAMES_FIELD_NUMBER: _ClassVar[int]
    P_VALUE_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    why: str
    wins: int
    losses: int
    draws: int
    others_wins: int
    others_games: int
    p_value: float
    def __init__(self, token_id: _Optional[int] = ..., why: _Optional[str] = ..., wins: _Optional[int] = ..., losses: _Optional[int] = ..., draws: _Optional[int] = ..., others_wins: _Optional[int] = ..., others_games: _Optional[int] = ..., p_value: _Optional[float] = ...) -> None: ...

class QuarantinedToken(_message.Message):
    __slots__ = ("token_id", "label", "since_unix_ms", "match_games", "training_games")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    MATCH_GAMES_FIELD_NUMBER: _ClassVar[int]
    TRAINING_GAMES_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    label: str
    since_unix_ms: int
    match_games: int
    training_games: int
    def __init__(self, token_id: _Optional[int] = ..., label: _Optional[str] = ..., since_unix_ms: _Optional[int] = ..., match_games: _Optional[int] = ..., training_games: _Optional[int] = ...) -> None: ...

class Stats(_message.Message):
    __slots__ = ("games_received", "games_accepted", "games_rejected", "games_duplicate", "positions_received", "positions_accepted", "shards_written", "rejects_by_reason", "workers", "models", "matches", "run", "uptime_s", "workers_total", "games_per_s", "positions_per_s", "rate_window_s", "workers_online", "contributors", "ratings", "models_total", "matches_total", "quarantined_tokens")
    class RejectsByReasonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    GAMES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    GAMES_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    GAMES_REJECTED_FIELD_NUMBER: _ClassVar[int]
    GAMES_DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    SHARDS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    REJECTS_BY_REASON_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    WORKERS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GAMES_PER_S_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_PER_S_FIELD_NUMBER: _ClassVar[int]
    RATE_WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    WORKERS_ONLINE_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTORS_FIELD_NUMBER: _ClassVar[int]
    RATINGS_FIELD_NUMBER: _ClassVar[int]
    MODELS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MATCHES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    games_received: int
    games_accepted: int
    games_rejected: int
    games_duplicate: int
    positions_received: int
    positions_accepted: int
    shards_written: int
    rejects_by_reason: _containers.ScalarMap[str, int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    models: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelInfo]
    matches: _containers.RepeatedCompositeFieldContainer[MatchSummary]
    run: str
    uptime_s: int
    workers_total: int
    games_per_s: float
    positions_per_s: float
    rate_window_s: int
    workers_online: int
    contributors: _containers.RepeatedCompositeFieldContainer[Contributor]
    ratings: _containers.RepeatedCompositeFieldContainer[Rating]
    models_total: int
    matches_total: int
    quarantined_tokens: _containers.RepeatedCompositeFieldContainer[QuarantinedToken]
    def __init__(self, games_received: _Optional[int] = ..., games_accepted: _Optional[int] = ..., games_rejected: _Optional[int] = ..., games_duplicate: _Optional[int] = ..., positions_received: _Optional[int] = ..., positions_accepted: _Optional[int] = ..., shards_written: _Optional[int] = ..., rejects_by_reason: _Optional[_Mapping[str, int]] = ..., workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., models: _Optional[_Iterable[_Union[_common_pb2.ModelInfo, _Mapping]]] = ..., matches: _Optional[_Iterable[_Union[MatchSummary, _Mapping]]] = ..., run: _Optional[str] = ..., uptime_s: _Optional[int] = ..., workers_total: _Optional[int] = ..., games_per_s: _Optional[float] = ..., positions_per_s: _Optional[float] = ..., rate_window_s: _Optional[int] = ..., workers_online: _Optional[int] = ..., contributors: _Optional[_Iterable[_Union[Contributor, _Mapping]]] = ..., ratings: _Optional[_Iterable[_Union[Rating, _Mapping]]] = ..., models_total: _Optional[int] = ..., matches_total: _Optional[int] = ..., quarantined_tokens: _Optional[_Iterable[_Union[QuarantinedToken, _Mapping]]] = ...) -> None: ...

class Contributor(_message.Message):
    __slots__ = ("username", "games", "positions", "last_seen_unix_ms", "share", "workers", "display_names")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    GAMES_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAMES_FIELD_NUMBER: _ClassVar[int]
    username: str
    games: int
    positions: int
    last_seen_unix_ms: int
    share: float
    workers: int
    display_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, username: _Optional[str] = ..., games: _Optional[int] = ..., positions: _Optional[int] = ..., last_seen_unix_ms: _Optional[int] = ..., share: _Optional[float] = ..., workers: _Optional[int] = ..., display_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ListShardsRequest(_message.Message):
    __slots__ = ("run", "after_index")
    RUN_FIELD_NUMBER: _ClassVar[int]
    AFTER_INDEX_FIELD_NUMBER: _ClassVar[int]
    run: str
    after_index: int
    def __init__(self, run: _Optional[str] = ..., after_index: _Optional[int] = ...) -> None: ...

class ShardInfo(_message.Message):
    __slots__ = ("run", "index", "file_name", "size_bytes", "sha256", "games", "positions", "board_size")
    RUN_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    GAMES_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    BOARD_SIZE_FIELD_NUMBER: _ClassVar[int]
    run: str
    index: int
    file_name: str
    size_bytes: int
    sha256: str
    games: int
    positions: int
    board_size: int
    def __init__(self, run: _Optional[str] = ..., index: _Optional[int] = ..., file_name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., games: _Optional[int] = ..., positions: _Optional[int] = ..., board_size: _Optional[int] = ...) -> None: ...

class ListShardsResponse(_message.Message):
    __slots__ = ("shards",)
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    shards: _containers.RepeatedCompositeFieldContainer[ShardInfo]
    def __init__(self, shards: _Optional[_Iterable[_Union[ShardInfo, _Mapping]]] = ...) -> None: ...

class DownloadShardRequest(_message.Message):
    __slots__ = ("run", "file_name", "offset")
    RUN_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    run: str
    file_name: str
    offset: int
    def __init__(self, run: _Optional[str] = ..., file_name: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("offset", "data", "size_bytes")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    size_bytes: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ListGamesRequest(_message.Message):
    __slots__ = ("model", "kind", "limit", "before_seq")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    model: str
    kind: GameKind
    limit: int
    before_seq: int
    def __init__(self, model: _Optional[str] = ..., kind: _Optional[_Union[GameKind, str]] = ..., limit: _Optional[int] = ..., before_seq: _Optional[int] = ...) -> None: ...

class GameSummary(_message.Message):
    __slots__ = ("game_id", "seq", "kind", "model", "black_model", "white_model", "board_size", "moves", "result", "worker_id", "finished_unix_ms", "stored_unix_ms", "komi")
    GAME_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BLACK_MODEL_FIELD_NUMBER: _ClassVar[int]
    WHITE_MODEL_FIELD_NUMBER: _ClassVar[int]
    BOARD_SIZE_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    STORED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    KOMI_FIELD_NUMBER: _ClassVar[int]
    game_id: str
    seq: int
    kind: GameKind
    model: str
    black_model: str
    white_model: str
    board_size: int
    moves: int
    result: str
    worker_id: str
    finished_unix_ms: int
    stored_unix_ms: int
    komi: float
    def __init__(self, game_id: _Optional[str] = ..., seq: _Optional[int] = ..., kind: _Optional[_Union[GameKind, str]] = ..., model: _Optional[str] = ..., black_model: _Optional[str] = ..., white_model: _Optional[str] = ..., board_size: _Optional[int] = ..., moves: _Optional[int] = ..., result: _Optional[str] = ..., worker_id: _Optional[str] = ..., finished_unix_ms: _Optional[int] = ..., stored_unix_ms: _Optional[int] = ..., komi: _Optional[float] = ...) -> None: ...

class ListGamesResponse(_message.Message):
    __slots__ = ("games",)
    GAMES_FIELD_NUMBER: _ClassVar[int]
    games: _containers.RepeatedCompositeFieldContainer[GameSummary]
    def __init__(self, games: _Optional[_Iterable[_Union[GameSummary, _Mapping]]] = ...) -> None: ...

class DownloadGameRequest(_message.Message):
    __slots__ = ("game_id",)
    GAME_ID_FIELD_NUMBER: _ClassVar[int]
    game_id: str
    def __init__(self, game_id: _Optional[str] = ...) -> None: ...

class DownloadGameResponse(_message.Message):
    __slots__ = ("game", "sgf")
    GAME_FIELD_NUMBER: _ClassVar[int]
    SGF_FIELD_NUMBER: _ClassVar[int]
    game: GameSummary
    sgf: str
    def __init__(self, game: _Optional[_Union[GameSummary, _Mapping]] = ..., sgf: _Optional[str] = ...) -> None: ...

class ReportRatingRequest(_message.Message):
    __slots__ = ("model", "opponent", "wins", "losses", "draws", "visits", "board_size", "komi", "rules", "distinct_games")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OPPONENT_FIELD_NUMBER: _ClassVar[int]
    WINS_FIELD_NUMBER: _ClassVar[int]
    LOSSES_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    VISITS_FIELD_NUMBER: _ClassVar[int]
    BOARD_SIZE_FIELD_NUMBER: _ClassVar[int]
    KOMI_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_GAMES_FIELD_NUMBER: _ClassVar[int]
    model: str
    opponent: str
    wins: int
    losses: int
    draws: int
    visits: int
    board_size: int
    komi: float
    rules: _common_pb2.Rules
    distinct_games: int
    def __init__(self, model: _Optional[str] = ..., opponent: _Optional[str] = ..., wins: _Optional[int] = ..., losses: _Optional[int] = ..., draws: _Optional[int] = ..., visits: _Optional[int] = ..., board_size: _Optional[int] = ..., komi: _Optional[float] = ..., rules: _Optional[_Union[_common_pb2.Rules, _Mapping]] = ..., distinct_games: _Optional[int] = ...) -> None: ...

class ReportRatingResponse(_message.Message):
    __slots__ = ("rating",)
    RATING_FIELD_NUMBER: _ClassVar[int]
    rating: Rating
    def __init__(self, rating: _Optional[_Union[Rating, _Mapping]] = ...) -> None: ...

class Rating(_message.Message):
    __slots__ = ("model", "opponent", "games", "wins", "losses", "draws", "win_rate", "win_low", "win_high", "elo", "elo_low", "elo_high", "training_steps", "training_rows", "selfplay_games", "wall_seconds", "visits", "board_size", "komi", "rules", "model_created_unix_ms", "reported_unix_ms", "distinct_games")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OPPONENT_FIELD_NUMBER: _ClassVar[int]
    GAMES_FIELD_NUMBER: _ClassVar[int]
    WINS_FIELD_NUMBER: _ClassVar[int]
    LOSSES_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    WIN_RATE_FIELD_NUMBER: _ClassVar[int]
    WIN_LOW_FIELD_NUMBER: _ClassVar[int]
    WIN_HIGH_FIELD_NUMBER: _ClassVar[int]
    ELO_FIELD_NUMBER: _ClassVar[int]
    ELO_LOW_FIELD_NUMBER: _ClassVar[int]
    ELO_HIGH_FIELD_NUMBER: _ClassVar[int]
    TRAINING_STEPS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_ROWS_FIELD_NUMBER: _ClassVar[int]
    SELFPLAY_GAMES_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VISITS_FIELD_NUMBER: _ClassVar[int]
    BOARD_SIZE_FIELD_NUMBER: _ClassVar[int]
    KOMI_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    MODEL_CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    REPORTED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_GAMES_FIELD_NUMBER: _ClassVar[int]
    model: str
    opponent: str
    games: int
    wins: int
    losses: int
    draws: int
    win_rate: float
    win_low: float
    win_high: float
    elo: float
    elo_low: float
    elo_high: float
    training_steps: int
    training_rows: int
    selfplay_games: int
    wall_seconds: float
    visits: int
    board_size: int
    komi: float
    rules: _common_pb2.Rules
    model_created_unix_ms: int
    reported_unix_ms: int
    distinct_games: int
    def __init__(self, model: _Optional[str] = ..., opponent: _Optional[str] = ..., games: _Optional[int] = ..., wins: _Optional[int] = ..., losses: _Optional[int] = ..., draws: _Optional[int] = ..., win_rate: _Optional[float] = ..., win_low: _Optional[float] = ..., win_high: _Optional[float] = ..., elo: _Optional[float] = ..., elo_low: _Optional[float] = ..., elo_high: _Optional[float] = ..., training_steps: _Optional[int] = ..., training_rows: _Optional[int] = ..., selfplay_games: _Optional[int] = ..., wall_seconds: _Optional[float] = ..., visits: _Optional[int] = ..., board_size: _Optional[int] = ..., komi: _Optional[float] = ..., rules: _Optional[_Union[_common_pb2.Rules, _Mapping]] = ..., model_created_unix_ms: _Optional[int] = ..., reported_unix_ms: _Optional[int] = ..., distinct_games: _Optional[int] = ...) -> None: ...

class ListRatingsRequest(_message.Message):
    __slots__ = ("model", "opponent", "latest_only", "limit")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OPPONENT_FIELD_NUMBER: _ClassVar[int]
    LATEST_ONLY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    model: str
    opponent: str
    latest_only: bool
    limit: int
    def __init__(self, model: _Optional[str] = ..., opponent: _Optional[str] = ..., latest_only: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class ListRatingsResponse(_message.Message):
    __slots__ = ("ratings", "truncated")
    RATINGS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ratings: _containers.RepeatedCompositeFieldContainer[Rating]
    truncated: bool
    def __init__(self, ratings: _Optional[_Iterable[_Union[Rating, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...
