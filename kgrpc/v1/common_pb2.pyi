from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoringRule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCORING_RULE_UNSPECIFIED: _ClassVar[ScoringRule]
    SCORING_RULE_AREA: _ClassVar[ScoringRule]
    SCORING_RULE_TERRITORY: _ClassVar[ScoringRule]

class KoRule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KO_RULE_UNSPECIFIED: _ClassVar[KoRule]
    KO_RULE_SIMPLE: _ClassVar[KoRule]
    KO_RULE_POSITIONAL: _ClassVar[KoRule]
    KO_RULE_SITUATIONAL: _ClassVar[KoRule]

class Color(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COLOR_UNSPECIFIED: _ClassVar[Color]
    COLOR_BLACK: _ClassVar[Color]
    COLOR_WHITE: _ClassVar[Color]

class ModelStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_STATUS_UNSPECIFIED: _ClassVar[ModelStatus]
    MODEL_STATUS_CANDIDATE: _ClassVar[ModelStatus]
    MODEL_STATUS_RELEASED: _ClassVar[ModelStatus]
    MODEL_STATUS_REJECTED: _ClassVar[ModelStatus]

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    PRECISION_FP32: _ClassVar[Precision]
    PRECISION_FP16: _ClassVar[Precision]
    PRECISION_INT8: _ClassVar[Precision]
SCORING_RULE_UNSPECIFIED: ScoringRule
SCORING_RULE_AREA: ScoringRule
SCORING_RULE_TERRITORY: ScoringRule
KO_RULE_UNSPECIFIED: KoRule
KO_RULE_SIMPLE: KoRule
KO_RULE_POSITIONAL: KoRule
KO_RULE_SITUATIONAL: KoRule
COLOR_UNSPECIFIED: Color
COLOR_BLACK: Color
COLOR_WHITE: Color
MODEL_STATUS_UNSPECIFIED: ModelStatus
MODEL_STATUS_CANDIDATE: ModelStatus
MODEL_STATUS_RELEASED: ModelStatus
MODEL_STATUS_REJECTED: ModelStatus
PRECISION_UNSPECIFIED: Precision
PRECISION_FP32: Precision
PRECISION_FP16: Precision
PRECISION_INT8: Precision

class Rules(_message.Message):
    __slots__ = ("scoring", "ko", "suicide_allowed")
    SCORING_FIELD_NUMBER: _ClassVar[int]
    KO_FIELD_NUMBER: _ClassVar[int]
    SUICIDE_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    scoring: ScoringRule
    ko: KoRule
    suicide_allowed: bool
    def __init__(self, scoring: _Optional[_Union[ScoringRule, str]] = ..., ko: _Optional[_Union[KoRule, str]] = ..., suicide_allowed: _Optional[bool] = ...) -> None: ...

class ModelFile(_message.Message):
    __slots__ = ("precision", "size_bytes", "sha256")
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    precision: Precision
    size_bytes: int
    sha256: str
    def __init__(self, precision: _Optional[_Union[Precision, str]] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "sha256", "size_bytes", "blocks", "channels", "training_steps", "training_rows", "feature_version", "status", "elo", "created_unix_ms", "released_unix_ms", "files", "elo_measured")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_STEPS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_ROWS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ELO_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RELEASED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ELO_MEASURED_FIELD_NUMBER: _ClassVar[int]
    name: str
    sha256: str
    size_bytes: int
    blocks: int
    channels: int
    training_steps: int
    training_rows: int
    feature_version: int
    status: ModelStatus
    elo: float
    created_unix_ms: int
    released_unix_ms: int
    files: _containers.RepeatedCompositeFieldContainer[ModelFile]
    elo_measured: bool
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., blocks: _Optional[int] = ..., channels: _Optional[int] = ..., training_steps: _Optional[int] = ..., training_rows: _Optional[int] = ..., feature_version: _Optional[int] = ..., status: _Optional[_Union[ModelStatus, str]] = ..., elo: _Optional[float] = ..., created_unix_ms: _Optional[int] = ..., released_unix_ms: _Optional[int] = ..., files: _Optional[_Iterable[_Union[ModelFile, _Mapping]]] = ..., elo_measured: _Optional[bool] = ...) -> None: ...
