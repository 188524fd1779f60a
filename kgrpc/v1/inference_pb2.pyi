from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EvalRequest(_message.Message):
    __slots__ = ("request_id", "model", "board_size", "count", "planes", "globals", "want_ownership", "feature_version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BOARD_SIZE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PLANES_FIELD_NUMBER: _ClassVar[int]
    GLOBALS_FIELD_NUMBER: _ClassVar[int]
    WANT_OWNERSHIP_FIELD_NUMBER: _ClassVar[int]
    FEATURE_VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    model: str
    board_size: int
    count: int
    planes: bytes
    globals: bytes
    want_ownership: bool
    feature_version: int
    def __init__(self, request_id: _Optional[int] = ..., model: _Optional[str] = ..., board_size: _Optional[int] = ..., count: _Optional[int] = ..., planes: _Optional[bytes] = ..., globals: _Optional[bytes] = ..., want_ownership: _Optional[bool] = ..., feature_version: _Optional[int] = ...) -> None: ...

class EvalResponse(_message.Message):
    __slots__ = ("request_id", "model", "count", "policy", "value", "score", "ownership", "error_code", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    OWNERSHIP_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    model: str
    count: int
    policy: bytes
    value: bytes
    score: bytes
    ownership: bytes
    error_code: int
    error: str
    def __init__(self, request_id: _Optional[int] = ..., model: _Optional[str] = ..., count: _Optional[int] = ..., policy: _Optional[bytes] = ..., value: _Optional[bytes] = ..., score: _Optional[bytes] = ..., ownership: _Optional[bytes] = ..., error_code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LoadedModel(_message.Message):
    __slots__ = ("name", "sha256", "provider", "feature_version", "is_default", "in_flight")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    FEATURE_VERSION_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    name: str
    sha256: str
    provider: str
    feature_version: int
    is_default: bool
    in_flight: int
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[str] = ..., provider: _Optional[str] = ..., feature_version: _Optional[int] = ..., is_default: _Optional[bool] = ..., in_flight: _Optional[int] = ...) -> None: ...

class GetModelInfoResponse(_message.Message):
    __slots__ = ("models", "default_model")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[LoadedModel]
    default_model: str
    def __init__(self, models: _Optional[_Iterable[_Union[LoadedModel, _Mapping]]] = ..., default_model: _Optional[str] = ...) -> None: ...

class GetInferenceStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InferenceStats(_message.Message):
    __slots__ = ("requests", "positions", "batches", "mean_batch_size", "evals_per_s", "batch_size_buckets", "batch_size_counts", "queue_wait_ms_p50", "queue_wait_ms_p99", "compute_ms_p50", "compute_ms_p99", "cache_hits", "cache_misses", "rejected_queue_full", "errors", "queue_depth", "uptime_s")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    MEAN_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    EVALS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_MS_P50_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_MS_P99_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_MS_P50_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_MS_P99_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    CACHE_MISSES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_QUEUE_FULL_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    requests: int
    positions: int
    batches: int
    mean_batch_size: float
    evals_per_s: float
    batch_size_buckets: _containers.RepeatedScalarFieldContainer[int]
    batch_size_counts: _containers.RepeatedScalarFieldContainer[int]
    queue_wait_ms_p50: float
    queue_wait_ms_p99: float
    compute_ms_p50: float
    compute_ms_p99: float
    cache_hits: int
    cache_misses: int
    rejected_queue_full: int
    errors: int
    queue_depth: int
    uptime_s: float
    def __init__(self, requests: _Optional[int] = ..., positions: _Optional[int] = ..., batches: _Optional[int] = ..., mean_batch_size: _Optional[float] = ..., evals_per_s: _Optional[float] = ..., batch_size_buckets: _Optional[_Iterable[int]] = ..., batch_size_counts: _Optional[_Iterable[int]] = ..., queue_wait_ms_p50: _Optional[float] = ..., queue_wait_ms_p99: _Optional[float] = ..., compute_ms_p50: _Optional[float] = ..., compute_ms_p99: _Optional[float] = ..., cache_hits: _Optional[int] = ..., cache_misses: _Optional[int] = ..., rejected_queue_full: _Optional[int] = ..., errors: _Optional[int] = ..., queue_depth: _Optional[int] = ..., uptime_s: _Optional[float] = ...) -> None: ...
