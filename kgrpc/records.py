"""Game records: proto <-> in-memory game <-> training rows, and the coordinator's validation.

``GameRecord`` (protos/kgrpc/v1/records.proto) carries moves and search targets, never board
dumps: :func:`proto_to_board_replay` replays every move through :class:`kgrpc.go.board.Board`,
checks every search target, recomputes the result, and (optionally) encodes the position before
each full-search move. :func:`training_rows` turns that into the shard rows of docs/formats.md
section 4 (the shard files themselves are written by ``kgrpc.shards``).

A bad record raises :class:`ReplayError` with one of :data:`REASON_CODES`:

=====================  ======================================================================
reason code            meaning
=====================  ======================================================================
bad_board_size         board_size outside 2..19
unsupported_rules      rules unspecified/unknown, or not among the accepted presets
bad_komi               komi not finite or absurd
too_short / too_long   fewer than ``min_moves`` / more moves than the game's move cap
targets_mismatch       number of search targets differs from the number of moves
illegal_move           a move that the rules forbid (or off the board, or after the game end)
policy_invalid         a target's sparse policy is malformed or names an illegal move
value_invalid          a target's root value/score is not finite or the value not in [-1, 1]
played_move_unvisited  a full-search move that its own search never visited
result_mismatch        the recorded winner/score disagree with the replay (or are malformed)
ownership_mismatch     the recorded ownership disagrees with the replay's area ownership
resign_inconsistent    a resignation the record contradicts (game over, wrong winner)
unfinished             the game ended neither by two passes, nor by resignation, nor at its cap
task_mismatch          the game is not what the task it names asked for (:func:`check_task`)
=====================  ======================================================================

Its ``detail`` is for people: it names a move counted from 1 (:func:`move_label`: the first
move of the game is "move 1") and a colour by name (:func:`colour_label`: black, white), never
by an index or an encoding.

How a game may end (checked by :func:`validate_record`): by two consecutive passes, by the
resignation of the player to move after the last recorded move (so ``winner`` is the other
colour, and the game was neither over by passes nor at its cap), or by reaching exactly its
move cap (:func:`move_cap`: the cap of the task it was played for). For games that ended by
two passes or at the cap, the replay's area ownership and its score under the game's rules
(every stone alive) are the truth. For resigned games the record's score estimate is trusted
within bounds (a draw cannot be resigned).

The move played at a full-search move must have had visits in that search: it has a positive
share in the target's policy, or (a pruned target may leave it out) the target's
``played_visits`` is at least 1. Records of format 2 (:data:`RECORD_FORMAT_VERSION`) carry
``played_visits`` on every full-search target, and it must be at least 1 there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kgrpc import native
from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError, PyBoard
from kgrpc.go.coords import to_gtp
from kgrpc.go.features import encode_flat, pack_planes
from kgrpc.go.rules import Rules
from kgrpc.schema import NUM_GLOBALS, packed_row_bytes
from kgrpc.v1 import common_pb2, records_pb2

log = logging.getLogger(__name__)

REASON_CODES = (
    "bad_board_size",
    "unsupported_rules",
    "bad_komi",
    "too_short",
    "too_long",
    "targets_mismatch",
    "illegal_move",
    "policy_invalid",
    "value_invalid",
    "played_move_unvisited",
    "result_mismatch",
    "ownership_mismatch",
    "resign_inconsistent",
    "unfinished",
    "task_mismatch",
)
# GameRecord.format_version this module writes: 2 = targets carry ``played_visits``. Records
# without the field (0) or with 1 come from older writers and are read as format 1.
RECORD_FORMAT_VERSION = 2
# The coordinator's defaults for the move cap (kgrpc.coordinator.config uses the same values).
DEFAULT_MAX_MOVES = 499
DEFAULT_MAX_MOVES_PER_POINT = 2.0

# Float32 on the wire: scores like 3.5 are exact, but allow rounding of odd komi values.
_SCORE_TOLERANCE = 1e-3
_POLICY_SUM_TOLERANCE = 1e-3


class ReplayError(ValueError):
    """A record that fails replay or validation; ``reason_code`` is one of REASON_CODES."""

    def __init__(self, reason_code: str, detail: str) -> None:
        assert reason_code in REASON_CODES, reason_code
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code = reason_code
        self.detail = detail


@dataclass
class ReplayResult:
    """What the replay established about a record."""

    board: Board  # final position
    rules: Rules
    score: float  # black minus white, komi included
    winner: int  # BLACK, WHITE or 0 (draw)
    ownership: np.ndarray  # int8 [N*N], the final position's area ownership (black's view)
    resigned: bool
    # Per full-search move (the training rows), filled when the replay collected features:
    row_moves: list[int] = field(default_factory=list)  # move numbers
    states: np.ndarray | None = None  # uint8 [R, packed_row_bytes(N)]
    globals: np.ndarray | None = None  # float32 [R, NUM_GLOBALS]
    movers: np.ndarray | None = None  # int8 [R], colour to move
    # Filled by the native replay (training_rows reads them instead of the targets again):
    policy: np.ndarray | None = None  # float32 [R, N*N+1], the record's probabilities
    root_values: np.ndarray | None = None  # float32 [R]
    # Per move, filled by the native replay (the SGF's values without walking the targets):
    move_values: np.ndarray | None = None  # float32 [M], each target's root_value
    move_visits: np.ndarray | None = None  # int32 [M], each target's visits
    move_full: np.ndarray | None = None  # uint8 [M], each target's full_search

    @property
    def num_moves(self) -> int:
        return len(self.board.moves)


def _colour_to_proto(colour: int) -> int:
    if colour == BLACK:
        return common_pb2.COLOR_BLACK
    if colour == WHITE:
        return common_pb2.COLOR_WHITE
    return common_pb2.COLOR_UNSPECIFIED


def _colour_from_proto(value: int) -> int:
    return {common_pb2.COLOR_BLACK: BLACK, common_pb2.COLOR_WHITE: WHITE}.get(value, 0)


def move_label(index: int) -> str:
    """How a rejection's detail names the move at ``index`` of ``GameRecord.moves``: counted
    from 1, as people and SGF count them (index 0 is "move 1", black's first move). Every
    detail that names a move or a search target uses this (docs/clients.md, "The acks")."""
    return f"move {index + 1}"


def colour_label(colour: int) -> str:
    """How a rejection's detail names a winner or a player: ``black``, ``white`` (whatever the
    encoding: +1/-1 here, COLOR_BLACK = 1 / COLOR_WHITE = 2 on the wire) or ``none (a draw)``."""
    return "black" if colour == BLACK else "white" if colour == WHITE else "none (a draw)"


def _winner_of(score: float) -> int:
    return BLACK if score > 0 else WHITE if score < 0 else 0


def move_cap(
    board_size: int,
    max_moves: int = DEFAULT_MAX_MOVES,
    max_moves_per_point: float = DEFAULT_MAX_MOVES_PER_POINT,
) -> int:
    """The move cap of a game on a ``board_size`` board: the worker stops and scores the game
    after this many moves. ``max_moves`` is the coordinator's limit (Task.max_moves; 0 = none),
    ``max_moves_per_point`` SelfPlaySettings' (a float32 on the wire, so it is rounded to
    float32 here too: worker and coordinator compute the same number)."""
    per_point = float(np.float32(max_moves_per_point))
    cap = max(1, int(per_point * board_size * board_size))
    return min(cap, max_moves) if max_moves > 0 else cap


@dataclass(frozen=True)
class TaskTerms:
    """What a task handed out allowed (the coordinator's stored copy of a ``Task``), for
    :func:`check_task`. ``komi_step`` 0: exactly ``komi_low``; otherwise any of ``komi_low``,
    ``komi_low + komi_step``, ... up to ``komi_high``. ``models``: the one model of a self-play
    task, or (candidate, reference) of a match task. ``worker_id`` "": any worker."""

    task_id: str
    board_size: int
    rules: str
    komi_low: float
    komi_high: float
    komi_step: float
    max_moves: int
    models: tuple[str, ...]
    worker_id: str = ""


_KOMI_GRID_TOLERANCE = 1e-3


def komi_in_range(komi: float, low: float, high: float, step: float) -> bool:
    """Whether ``komi`` is one of the values a task's komi range allows (float32 rounding
    tolerated)."""
    if not math.isfinite(komi):
        return False
    if step <= 0:
        return abs(komi - low) <= _KOMI_GRID_TOLERANCE
    if not low - _KOMI_GRID_TOLERANCE <= komi <= high + _KOMI_GRID_TOLERANCE:
        return False
    k = (komi - low) / step
    return abs(k - round(k)) * step <= _KOMI_GRID_TOLERANCE


def komi_values(low: float, high: float, step: float) -> list[float]:
    """The komi values a range allows (the grid :func:`komi_in_range` accepts): ``low``,
    ``low + step``, ... up to ``high``; ``[low]`` when ``step`` is 0. Workers draw each
    game's komi from these."""
    if step <= 0:
        return [low]
    count = int(math.floor((high - low) / step + _KOMI_GRID_TOLERANCE)) + 1
    return [low + i * step for i in range(max(1, count))]


def check_task(record: records_pb2.GameRecord, task: TaskTerms, worker_id: str = "") -> None:
    """Raise ReplayError("task_mismatch") unless ``record`` is a game its task asked for:
    same task id, board size and rules, komi within the task's range, the task's model(s)
    (self-play: both sides the task's model; match: candidate against reference), played by
    the worker the task was issued to (``worker_id``: the id the upload is counted under)."""

    def bad(detail: str) -> ReplayError:
        return ReplayError("task_mismatch", f"task {task.task_id!r}: {detail}")

    if record.task_id != task.task_id:
        raise bad(f"the record names task {record.task_id!r}")
    if task.worker_id and worker_id != task.worker_id:
        raise bad(f"issued to worker {task.worker_id!r}, not {worker_id!r}")
    if record.board_size != task.board_size:
        raise bad(
            f"board size {record.board_size}, the task is {task.board_size}x{task.board_size}"
        )
    try:
        rules = Rules.from_proto(record.rules).name
    except ValueError as exc:
        raise ReplayError("unsupported_rules", str(exc)) from None
    if rules != task.rules:
        raise bad(f"rules {rules!r}, the task's are {task.rules!r}")
    if not komi_in_range(record.komi, task.komi_low, task.komi_high, task.komi_step):
        allowed = (
            f"{task.komi_low:g}"
            if task.komi_step <= 0
            else f"{task.komi_low:g}..{task.komi_high:g} in steps of {task.komi_step:g}"
        )
        raise bad(f"komi {record.komi:g} outside the task's {allowed}")
    sides = (record.black_model, record.white_model)
    if len(task.models) == 1:
        ok = sides == (task.models[0], task.models[0])
    else:
        ok = sorted(sides) == sorted(task.models[:2]) and sides[0] != sides[1]
    if not ok:
        raise bad(
            f"models {sides[0]!r} vs {sides[1]!r}, the task's are "
            f"{' vs '.join(repr(m) for m in task.models)}"
        )


# --------------------------------------------------------------------------- building records


def make_target(
    policy: Mapping[int, float] | np.ndarray,
    *,
    visits: int,
    root_value: float,
    root_score: float = 0.0,
    full_search: bool = True,
    played_visits: int = 0,
) -> records_pb2.SearchTarget:
    """A SearchTarget from a dense policy vector [N*N+1] or a {move: probability} mapping;
    ``played_visits``: the child visits of the move then played (see records.proto)."""
    if isinstance(policy, np.ndarray):
        nz = np.flatnonzero(policy)
        moves, probs = nz.tolist(), policy[nz].astype(np.float64).tolist()
    else:
        items = sorted((int(m), float(p)) for m, p in policy.items() if p > 0)
        moves, probs = [m for m, _ in items], [p for _, p in items]
    return records_pb2.SearchTarget(
        full_search=full_search,
        visits=int(visits),
        policy_moves=moves,
        policy_probs=probs,
        root_value=float(root_value),
        root_score=float(root_score),
        played_visits=int(played_visits),
    )


def game_to_proto(
    board: Board,
    targets: Sequence[records_pb2.SearchTarget],
    *,
    game_id: str,
    black_model: str = "",
    white_model: str = "",
    resigned_winner: int | None = None,
    resign_score: float | None = None,
    worker_id: str = "",
    task_id: str = "",
    finished_unix_ms: int = 0,
) -> records_pb2.GameRecord:
    """The record of the game played on ``board`` (its move history), one target per move.

    For a finished game (passes or move cap) the result is the board's score with every stone
    alive and its area ownership. For a resignation pass ``resigned_winner`` (BLACK/WHITE: the
    opponent of the player to move, who resigned) and optionally ``resign_score``, the score
    estimate (black's view) at resignation. The record is written as format 2
    (:data:`RECORD_FORMAT_VERSION`) when every full-search target carries ``played_visits``,
    else as format 1.
    """
    if len(targets) != len(board.moves):
        raise ValueError(f"{len(targets)} targets for {len(board.moves)} moves")
    ownership = board.area_ownership()
    if resigned_winner is None:
        score = board.score()
        result = records_pb2.GameResult(
            winner=_colour_to_proto(_winner_of(score)),
            score=score,
            ownership=ownership.tolist(),
        )
    else:
        if resigned_winner not in (BLACK, WHITE):
            raise ValueError("resigned_winner must be BLACK or WHITE")
        default = 1.0 if resigned_winner == BLACK else -1.0
        result = records_pb2.GameResult(
            winner=_colour_to_proto(resigned_winner),
            score=default if resign_score is None else resign_score,
            ownership=ownership.tolist(),
            resigned=True,
        )
    return records_pb2.GameRecord(
        game_id=game_id,
        rules=board.rules.to_proto(),
        komi=board.komi,
        board_size=board.size,
        black_model=black_model,
        white_model=white_model,
        moves=board.moves,
        targets=targets,
        result=result,
        worker_id=worker_id,
        task_id=task_id,
        finished_unix_ms=finished_unix_ms,
        format_version=(
            RECORD_FORMAT_VERSION
            if all(t.played_visits > 0 for t in targets if t.full_search)
            else 1
        ),
    )


# --------------------------------------------------------------------------- replay


def _check_target(
    i: int, target: records_pb2.SearchTarget, board: Board, legal: np.ndarray
) -> None:
    moves = target.policy_moves
    probs = target.policy_probs
    where = move_label(i)
    if len(moves) != len(probs):
        raise ReplayError(
            "policy_invalid", f"{where}: {len(moves)} policy moves but {len(probs)} probabilities"
        )
    if not moves:
        raise ReplayError("policy_invalid", f"{where}: empty policy")
    pm = np.fromiter(moves, dtype=np.int64, count=len(moves))
    pp = np.fromiter(probs, dtype=np.float64, count=len(probs))
    nn = board.num_points
    if pm.min() < 0 or pm.max() > nn:
        raise ReplayError("policy_invalid", f"{where}: policy names a point outside 0..{nn}")
    if len(np.unique(pm)) != len(pm):
        raise ReplayError("policy_invalid", f"{where}: policy names a move twice")
    if not np.isfinite(pp).all() or (pp < 0).any():
        raise ReplayError("policy_invalid", f"{where}: probabilities must be finite and >= 0")
    total = float(pp.sum())
    if abs(total - 1.0) > _POLICY_SUM_TOLERANCE:
        raise ReplayError("policy_invalid", f"{where}: probabilities sum to {total:.6f}, not 1")
    bad = pm[~legal[pm]]
    if len(bad):
        raise ReplayError(
            "policy_invalid",
            f"{where}: policy names illegal move {to_gtp(int(bad[0]), board.size)}",
        )
    v = target.root_value
    if not math.isfinite(v) or not -1.0 <= v <= 1.0:
        raise ReplayError("value_invalid", f"{where}: root_value {v} not a number in [-1, 1]")
    if not math.isfinite(target.root_score):
        raise ReplayError("value_invalid", f"{where}: root_score {target.root_score} not finite")
    if not 0 <= target.played_visits <= max(target.visits, 0):
        raise ReplayError(
            "policy_invalid",
            f"{where}: played_visits {target.played_visits} outside 0..visits ({target.visits})",
        )


def _check_played(
    i: int, target: records_pb2.SearchTarget, move: int, size: int, format_version: int
) -> None:
    """A full search's played move had visits: a positive share in the policy, or (a pruned
    target) ``played_visits`` >= 1; format 2 records carry ``played_visits`` always."""
    if not target.full_search:
        return
    where = f"{move_label(i)} ({to_gtp(move, size)}, a full search)"
    if format_version >= RECORD_FORMAT_VERSION and target.played_visits < 1:
        raise ReplayError(
            "played_move_unvisited",
            f"{where}: played_visits {target.played_visits}; the played move must have had "
            "visits (format 2 records carry played_visits on every full-search target)",
        )
    if target.played_visits >= 1:
        return
    share = sum(
        p for m, p in zip(target.policy_moves, target.policy_probs, strict=True) if m == move
    )
    if not share > 0:
        raise ReplayError(
            "played_move_unvisited",
            f"{where}: the target gives the played move no probability and no played_visits",
        )


def _check_resignation(winner: int, board: Board) -> None:
    """A resignation the final position allows: not after two passes, and the player to move
    after the last move resigned (so ``winner``, the other colour, was not to move)."""
    if board.consecutive_passes >= 2:
        raise ReplayError("resign_inconsistent", "the game ended by two passes: nobody resigned it")
    if winner == board.to_play:
        side = colour_label(winner)
        raise ReplayError(
            "resign_inconsistent",
            f"the record names {side} as winner, but {side} was to move after the last "
            "move: the player to move resigns, so the other colour wins",
        )


def _size_and_rules(record: records_pb2.GameRecord) -> tuple[int, Rules]:
    """The record's board size and rules, or the ReplayError that rejects them."""
    n = record.board_size
    if not 2 <= n <= 19:
        raise ReplayError("bad_board_size", f"board_size {n} outside 2..19")
    try:
        return n, Rules.from_proto(record.rules)
    except ValueError as exc:
        raise ReplayError("unsupported_rules", str(exc)) from None


def _check_komi(komi: float, n: int) -> None:
    if not math.isfinite(komi) or abs(komi) > n * n:
        raise ReplayError("bad_komi", f"komi {komi} is not finite or exceeds the board's area")


def proto_to_board_replay(
    record: records_pb2.GameRecord,
    *,
    collect_features: bool = True,
    check_targets: bool = True,
    wire: bytes | None = None,
) -> ReplayResult:
    """Replay ``record`` through the rules engine; raise ReplayError if anything is wrong.

    With ``collect_features`` the position before every full-search move is encoded on the way
    (what :func:`training_rows` needs), so a record is replayed once for validation and rows.
    The native core replays when it is installed (:func:`replay_native`); this module's
    Python replay (:func:`replay_python`) is the reference and words every rejection.
    ``wire``: the serialized ``record`` when the caller has it (saves the native replay a
    re-serialization).
    """
    if native.ENABLED:
        return replay_native(
            record, collect_features=collect_features, check_targets=check_targets, wire=wire
        )
    return replay_python(record, collect_features=collect_features, check_targets=check_targets)


def replay_native(
    record: records_pb2.GameRecord,
    *,
    collect_features: bool = True,
    check_targets: bool = True,
    wire: bytes | None = None,
) -> ReplayResult:
    """:func:`proto_to_board_replay` in C++ (kgrpc_native.replay, from the wire bytes:
    ``wire`` when given, which must be ``record`` serialized, else serialized here).

    A rejected record is replayed again in Python, which raises the ReplayError with its
    message (rejections are rare; their wording lives in one place). Same verdicts, rows and
    results as :func:`replay_python` (tests/test_native_replay.py).
    """
    ext = native.ext
    assert ext is not None
    data = wire if wire is not None else record.SerializeToString()
    out = ext.replay(data, collect_features, check_targets)
    if out["reason"]:
        replay_python(record, collect_features=False, check_targets=check_targets)
        log.error(
            "native replay rejected a record (%s at move %s) that the Python replay "
            "accepts; using the Python verdict",
            out["reason"],
            out["move"],
        )
        return replay_python(record, collect_features=collect_features, check_targets=check_targets)
    result = ReplayResult(
        board=out["board"],
        rules=out["rules"],
        score=out["score"],
        winner=out["winner"],
        ownership=out["ownership"],
        resigned=out["resigned"],
    )
    if collect_features:
        result.row_moves = out["row_moves"].tolist()
        result.states = out["states"]
        result.globals = out["globals"]
        result.movers = out["movers"]
        result.policy = out["policy"]
        result.root_values = out["root_value"]
        result.move_values = out["move_values"]
        result.move_visits = out["move_visits"]
        result.move_full = out["move_full"]
    return result


def replay_python(
    record: records_pb2.GameRecord,
    *,
    collect_features: bool = True,
    check_targets: bool = True,
) -> ReplayResult:
    """:func:`proto_to_board_replay` through the pure-Python board (the reference)."""
    n, rules = _size_and_rules(record)
    komi = record.komi
    _check_komi(komi, n)
    moves = record.moves
    targets = record.targets
    if len(targets) != len(moves):
        raise ReplayError(
            "targets_mismatch", f"{len(moves)} moves but {len(targets)} search targets"
        )
    board = PyBoard(n, rules, komi)
    nn = n * n
    fmt = record.format_version
    row_moves: list[int] = []
    planes: list[np.ndarray] = []
    globs: list[np.ndarray] = []
    movers: list[int] = []
    for i, m in enumerate(moves):
        target = targets[i]
        full = target.full_search
        if board.is_over():
            raise ReplayError("illegal_move", f"{move_label(i)}: the game was already over")
        if check_targets:
            _check_target(i, target, board, board.legal_mask())
        if collect_features and full:
            p, g = encode_flat(board)
            planes.append(p)
            globs.append(g)
            row_moves.append(i)
            movers.append(board.to_play)
        if not 0 <= m <= nn:
            raise ReplayError("illegal_move", f"{move_label(i)}: point {m} is off a {n}x{n} board")
        try:
            board.play(m)
        except IllegalMoveError as exc:
            raise ReplayError("illegal_move", f"{move_label(i)}: {exc}") from None
        if check_targets:
            _check_played(i, target, m, n, fmt)

    res = record.result
    ownership = board.area_ownership()
    if res.resigned:
        winner = _colour_from_proto(res.winner)
        if winner == 0:
            raise ReplayError("result_mismatch", "a resigned game must name a winner")
        _check_resignation(winner, board)
        score = float(res.score)
        # The estimate becomes every row's score target: keep it finite, within what a final
        # score can be on this board, and on the winner's side.
        limit = nn + abs(komi)
        if not math.isfinite(score) or abs(score) > limit:
            raise ReplayError(
                "result_mismatch",
                f"score {score} is not a number within +-{limit:g} (board area plus komi)",
            )
        if score * winner < 0:
            raise ReplayError(
                "result_mismatch",
                f"score {score} contradicts the winner {colour_label(winner)}",
            )
        if len(res.ownership) and (
            len(res.ownership) != nn or any(o not in (-1, 0, 1) for o in res.ownership)
        ):
            raise ReplayError(
                "ownership_mismatch", f"ownership must be empty or {nn} values in -1..1"
            )
    else:
        score = board.score()
        winner = _winner_of(score)
        recorded = _colour_from_proto(res.winner)
        if recorded != winner or not abs(res.score - score) <= _SCORE_TOLERANCE:
            raise ReplayError(
                "result_mismatch",
                f"record says winner {colour_label(recorded)} score {res.score}, replay "
                f"gives winner {colour_label(winner)} score {score}",
            )
        if len(res.ownership) != nn:
            raise ReplayError(
                "ownership_mismatch", f"{len(res.ownership)} ownership values, expected {nn}"
            )
        rec_own = np.fromiter(res.ownership, dtype=np.int64, count=nn)
        diff = np.flatnonzero(rec_own != ownership)
        if len(diff):
            p = int(diff[0])
            raise ReplayError(
                "ownership_mismatch",
                f"{len(diff)} points differ from the replay's area ownership, first "
                f"{to_gtp(p, n)}: record {int(rec_own[p])}, replay {int(ownership[p])}",
            )
    result = ReplayResult(
        board=board,
        rules=rules,
        score=score,
        winner=winner,
        ownership=ownership,
        resigned=res.resigned,
    )
    if collect_features:
        result.row_moves = row_moves
        if planes:
            result.states = pack_planes(np.stack(planes))
            result.globals = np.stack(globs)
        else:
            result.states = np.zeros((0, packed_row_bytes(board.size)), dtype=np.uint8)
            result.globals = np.zeros((0, NUM_GLOBALS), dtype=np.float32)
        result.movers = np.array(movers, dtype=np.int8)
    return result


def validate_record(
    record: records_pb2.GameRecord,
    min_moves: int = 11,
    max_moves: int = DEFAULT_MAX_MOVES,
    allowed_rules: Iterable[str] = ("chinese",),
    allowed_sizes: Iterable[int] | None = None,
    collect_features: bool = True,
    *,
    max_moves_per_point: float = DEFAULT_MAX_MOVES_PER_POINT,
    task: TaskTerms | None = None,
    worker_id: str = "",
    wire: bytes | None = None,
) -> ReplayResult:
    """The coordinator's acceptance check: limits first (cheap), then the full replay, then
    how the game ended. The game's move cap is its task's (``task.max_moves``) when the task
    is known, else :func:`move_cap` of ``max_moves`` and ``max_moves_per_point``. With
    ``task`` the record must also be a game that task asked for (:func:`check_task`,
    ``worker_id`` being the worker the upload counts under). ``wire``: the bytes ``record`` was
    parsed from, when at hand (the native replay reads them instead of serializing again)."""
    n = record.board_size
    if allowed_sizes is not None and n not in set(allowed_sizes):
        raise ReplayError("bad_board_size", f"board_size {n} not accepted here")
    n, rules = _size_and_rules(record)
    allowed = tuple(allowed_rules)
    if rules.name not in allowed:
        raise ReplayError(
            "unsupported_rules", f"rules {rules} not accepted (accepted: {', '.join(allowed)})"
        )
    if task is not None:
        _check_komi(record.komi, n)  # an absurd komi is bad_komi, whatever the task allowed
        check_task(record, task, worker_id)
        # The task's own cap, as issued: a later change of the settings does not turn the
        # games spooled under it into rejects.
        cap = task.max_moves if task.max_moves > 0 else move_cap(n, max_moves, max_moves_per_point)
    else:
        cap = move_cap(n, max_moves, max_moves_per_point)
    played = len(record.moves)
    if played < min_moves:
        raise ReplayError("too_short", f"{played} moves, at least {min_moves} needed")
    if played > cap:
        raise ReplayError("too_long", f"{played} moves, at most {cap} allowed on {n}x{n}")
    replay = proto_to_board_replay(record, collect_features=collect_features, wire=wire)
    by_passes = replay.board.consecutive_passes >= 2
    if replay.resigned:
        if played >= cap:
            raise ReplayError(
                "resign_inconsistent",
                f"the game reached its move cap ({cap}) and was scored there: nobody resigned",
            )
    elif not by_passes and played != cap:
        raise ReplayError(
            "unfinished",
            f"{played} moves without two final passes or a resignation; a game stopped "
            f"before the end must stop at its move cap ({cap} moves on {n}x{n})",
        )
    return replay


# --------------------------------------------------------------------------- training rows


def training_rows(
    record: records_pb2.GameRecord, replay: ReplayResult | None = None
) -> dict[str, np.ndarray]:
    """Shard rows (docs/formats.md section 4) for the record's full-search moves.

    Keys: states, globals, policy, value, score, ownership, move_number, root_value. Pass the
    ReplayResult of an earlier validation (made with collect_features) to avoid a second replay.
    """
    if replay is None or replay.states is None:
        replay = proto_to_board_replay(record, collect_features=True)
    n = record.board_size
    nn = n * n
    rows = len(replay.row_moves)
    if replay.policy is not None and replay.root_values is not None:
        policy = replay.policy.copy()
        root_value = replay.root_values
    else:
        policy = np.zeros((rows, nn + 1), dtype=np.float32)
        root_value = np.zeros(rows, dtype=np.float32)
        for r, i in enumerate(replay.row_moves):
            t = record.targets[i]
            policy[r, list(t.policy_moves)] = list(t.policy_probs)
            root_value[r] = t.root_value
    if rows:
        # The record's sums are within 1e-3 of 1; the shard promises exactly 1 (in float32).
        policy /= policy.sum(axis=1, keepdims=True)
    movers = replay.movers if replay.movers is not None else np.zeros(0, np.int8)
    mover_f = movers.astype(np.float32)
    return {
        "states": replay.states,
        "globals": replay.globals,
        "policy": policy,
        "value": mover_f * np.float32(replay.winner),
        "score": mover_f * np.float32(replay.score),
        "ownership": (movers[:, None] * replay.ownership[None, :]).astype(np.int8),
        "move_number": np.array(replay.row_moves, dtype=np.int32),
        "root_value": root_value,
    }
