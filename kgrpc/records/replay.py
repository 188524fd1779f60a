"""Replaying a game record through the rules engine: :func:`proto_to_board_replay` replays
every move through :class:`kgrpc.go.board.Board`, checks every search target, recomputes the
result, and (optionally) encodes the position before each full-search move. The native core
replays when it is installed (:func:`replay_native`); :func:`replay_python` is the reference
and words every rejection (a :class:`~kgrpc.records.errors.ReplayError`).

For games that ended by two passes or at the cap, the replay's area ownership and its score
under the game's rules (every stone alive) are the truth. For resigned games the record's
score estimate is trusted within bounds (a draw cannot be resigned).

The move played at a full-search move must have had visits in that search: it has a positive
share in the target's policy, or (a pruned target may leave it out) the target's
``played_visits`` is at least 1. Records of format 2
(:data:`~kgrpc.records.build.RECORD_FORMAT_VERSION`) carry ``played_visits`` on every
full-search target, and it must be at least 1 there.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from kgrpc import native
from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError, PyBoard
from kgrpc.go.coords import to_gtp
from kgrpc.go.features import encode_flat, pack_planes
from kgrpc.go.rules import Rules
from kgrpc.records.build import RECORD_FORMAT_VERSION, winner_of
from kgrpc.records.errors import ReplayError, colour_label, move_label
from kgrpc.schema import NUM_GLOBALS, packed_row_bytes
from kgrpc.v1 import common_pb2, records_pb2

log = logging.getLogger(__name__)

# Float32 on the wire: scores like 3.5 are exact, but allow rounding of odd komi values.
_SCORE_TOLERANCE = 1e-3
_POLICY_SUM_TOLERANCE = 1e-3


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


def _colour_from_proto(value: int) -> int:
    return {common_pb2.COLOR_BLACK: BLACK, common_pb2.COLOR_WHITE: WHITE}.get(value, 0)


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


def size_and_rules(record: records_pb2.GameRecord) -> tuple[int, Rules]:
    """The record's board size and rules, or the ReplayError that rejects them."""
    n = record.board_size
    if not 2 <= n <= 19:
        raise ReplayError("bad_board_size", f"board_size {n} outside 2..19")
    try:
        return n, Rules.from_proto(record.rules)
    except ValueError as exc:
        raise ReplayError("unsupported_rules", str(exc)) from None


def check_komi(komi: float, n: int) -> None:
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
    n, rules = size_and_rules(record)
    komi = record.komi
    check_komi(komi, n)
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
        winner = winner_of(score)
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
