from kgrpc.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SearchTarget(_message.Message):
    __slots__ = ("full_search", "visits", "policy_moves", "policy_probs", "root_value", "root_score", "played_visits")
    FULL_SEARCH_FIELD_NUMBER: _ClassVar[int]
    VISITS_FIELD_NUMBER: _ClassVar[int]
    POLICY_MOVES_FIELD_NUMBER: _ClassVar[int]
    POLICY_PROBS_FIELD_NUMBER: _ClassVar[int]
    ROOT_VALUE_FIELD_NUMBER: _ClassVar[int]
    ROOT_SCORE_FIELD_NUMBER: _ClassVar[int]
    PLAYED_VISITS_FIELD_NUMBER: _ClassVar[int]
    full_search: bool
    visits: int
    policy_moves: _containers.RepeatedScalarFieldContainer[int]
    policy_probs: _containers.RepeatedScalarFieldContainer[float]
    root_value: float
    root_score: float
    played_visits: int
    def __init__(self, full_search: _Optional[bool] = ..., visits: _Optional[int] = ..., policy_moves: _Optional[_Iterable[int]] = ..., policy_probs: _Optional[_Iterable[float]] = ..., root_value: _Optional[float] = ..., root_score: _Optional[float] = ..., played_visits: _Optional[int] = ...) -> None: ...

class GameResult(_message.Message):
    __slots__ = ("winner", "score", "ownership", "resigned")
    WINNER_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    OWNERSHIP_FIELD_NUMBER: _ClassVar[int]
    RESIGNED_FIELD_NUMBER: _ClassVar[int]
    winner: _common_pb2.Color
    score: float
    ownership: _containers.RepeatedScalarFieldContainer[int]
    resigned: bool
    def __init__(self, winner: _Optional[_Union[_common_pb2.Color, str]] = ..., score: _Optional[float] = ..., ownership: _Optional[_Iterable[int]] = ..., resigned: _Optional[bool] = ...) -> None: ...

class GameRecord(_message.Message):
    __slots__ = ("game_id", "rules", "komi", "board_size", "black_model", "white_model", "moves", "targets", "result", "worker_id", "task_id", "finished_unix_ms", "format_version")
    GAME_ID_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    KOMI_FIELD_NUMBER: _ClassVar[int]
    BOARD_SIZE_FIELD_NUMBER: _ClassVar[int]
    BLACK_MODEL_FIELD_NUMBER: _ClassVar[int]
    WHITE_MODEL_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    game_id: str
    rules: _common_pb2.Rules
    komi: float
    board_size: int
    black_model: str
    white_model: str
    moves: _containers.RepeatedScalarFieldContainer[int]
    targets: _containers.RepeatedCompositeFieldContainer[SearchTarget]
    result: GameResult
    worker_id: str
    task_id: str
    finished_unix_ms: int
    format_version: int
    def __init__(self, game_id: _Optional[str] = ..., rules: _Optional[_Union[_common_pb2.Rules, _Mapping]] = ..., komi: _Optional[float] = ..., board_size: _Optional[int] = ..., black_model: _Optional[str] = ..., white_model: _Optional[str] = ..., moves: _Optional[_Iterable[int]] = ..., targets: _Optional[_Iterable[_Union[SearchTarget, _Mapping]]] = ..., result: _Optional[_Union[GameResult, _Mapping]] = ..., worker_id: _Optional[str] = ..., task_id: _Optional[str] = ..., finished_unix_ms: _Optional[int] = ..., format_version: _Optional[int] = ...) -> None: ...

class GameBatch(_message.Message):
    __slots__ = ("games",)
    GAMES_FIELD_NUMBER: _ClassVar[int]
    games: _containers.RepeatedCompositeFieldContainer[GameRecord]
    def __init__(self, games: _Optional[_Iterable[_Union[GameRecord, _Mapping]]] = ...) -> None: ...
