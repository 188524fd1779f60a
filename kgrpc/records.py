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
too_short / too_long   fewer than ``min_moves`` / more than ``max_moves`` moves
targets_mismatch       number of search targets differs from the number of moves
illegal_move           a move that the rules forbid (or off the board, or after the game end)
policy_invalid         a target's sparse policy is malformed or names an illegal move
value_invalid          a target's root value/score is not finite or the value not in [-1, 1]
result_mismatch        the recorded winner/score disagree with the replay (or are malformed)
ownership_mismatch     the recorded ownership disagrees with the replay's area ownership
=====================  ======================================================================

For games that ended by two passes or a move cap, the replay's area ownership and its score
under the game's rules (every stone alive) are the truth. For resigned games the record's winner
and score estimate are trusted (a draw cannot be resigned).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError
from kgrpc.go.coords import to_gtp
from kgrpc.go.features import encode_flat, pack_planes
from kgrpc.go.rules import Rules
from kgrpc.schema import NUM_GLOBALS, packed_row_bytes
from kgrpc.v1 import common_pb2, records_pb2

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
    "result_mismatch",
    "ownership_mismatch",
)

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
    globals: np.ndarray | None = None  # float32 [R, 8]
    movers: np.ndarray | None = None  # int8 [R], colour to move

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


def _winner_of(score: float) -> int:
    return BLACK if score > 0 else WHITE if score < 0 else 0


# --------------------------------------------------------------------------- building records


def make_target(
    policy: Mapping[int, float] | np.ndarray,
    *,
    visits: int,
    root_value: float,
    root_score: float = 0.0,
    full_search: bool = True,
) -> records_pb2.SearchTarget:
    """A SearchTarget from a dense policy vector [N*N+1] or a {move: probability} mapping."""
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
    alive and its area ownership. For a resignation pass ``resigned_winner`` (BLACK/WHITE) and
    optionally ``resign_score``, the score estimate (black's view) at resignation.
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
    )


# --------------------------------------------------------------------------- replay


def _check_target(
    i: int, target: records_pb2.SearchTarget, board: Board, legal: np.ndarray
) -> None:
    moves = target.policy_moves
    probs = target.policy_probs
    where = f"move {i}"
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


def _size_and_rules(record: records_pb2.GameRecord) -> tuple[int, Rules]:
    """The record's board size and rules, or the ReplayError that rejects them."""
    n = record.board_size
    if not 2 <= n <= 19:
        raise ReplayError("bad_board_size", f"board_size {n} outside 2..19")
    try:
        return n, Rules.from_proto(record.rules)
    except ValueError as exc:
        raise ReplayError("unsupported_rules", str(exc)) from None


def proto_to_board_replay(
    record: records_pb2.GameRecord,
    *,
    collect_features: bool = True,
    check_targets: bool = True,
) -> ReplayResult:
    """Replay ``record`` through the rules engine; raise ReplayError if anything is wrong.

    With ``collect_features`` the position before every full-search move is encoded on the way
    (what :func:`training_rows` needs), so a record is replayed once for validation and rows.
    """
    n, rules = _size_and_rules(record)
    komi = record.komi
    if not math.isfinite(komi) or abs(komi) > n * n:
        raise ReplayError("bad_komi", f"komi {komi} is not finite or exceeds the board's area")
    moves = record.moves
    targets = record.targets
    if len(targets) != len(moves):
        raise ReplayError(
            "targets_mismatch", f"{len(moves)} moves but {len(targets)} search targets"
        )
    board = Board(n, rules, komi)
    nn = n * n
    row_moves: list[int] = []
    planes: list[np.ndarray] = []
    globs: list[np.ndarray] = []
    movers: list[int] = []
    for i, m in enumerate(moves):
        target = targets[i]
        full = target.full_search
        if board.is_over():
            raise ReplayError("illegal_move", f"move {i}: the game was already over")
        if check_targets:
            _check_target(i, target, board, board.legal_mask())
        if collect_features and full:
            p, g = encode_flat(board)
            planes.append(p)
            globs.append(g)
            row_moves.append(i)
            movers.append(board.to_play)
        if not 0 <= m <= nn:
            raise ReplayError("illegal_move", f"move {i}: point {m} is off a {n}x{n} board")
        try:
            board.play(m)
        except IllegalMoveError as exc:
            raise ReplayError("illegal_move", f"move {i}: {exc}") from None

    res = record.result
    ownership = board.area_ownership()
    if res.resigned:
        winner = _colour_from_proto(res.winner)
        if winner == 0:
            raise ReplayError("result_mismatch", "a resigned game must name a winner")
        score = float(res.score)
        # The estimate becomes every row's score target: keep it finite, within what a final
        # score can be on this board, and on the winner's side.
        limit = nn + abs(komi)
        if not math.isfinite(score) or abs(score) > limit:
            raise ReplayError("result_mismatch", f"score {score} is not a number within +-{limit:g} (board area plus komi)")
        if score * winner < 0:
            raise ReplayError("result_mismatch", f"score {score} contradicts the winner {winner:+d}")
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
                f"record says winner {recorded:+d} score {res.score}, replay gives "
                f"winner {winner:+d} score {score}",
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
    max_moves: int = 499,
    allowed_rules: Iterable[str] = ("chinese",),
    allowed_sizes: Iterable[int] | None = None,
    collect_features: bool = True,
) -> ReplayResult:
    """The coordinator's acceptance check: limits first (cheap), then the full replay."""
    n = record.board_size
    if allowed_sizes is not None and n not in set(allowed_sizes):
        raise ReplayError("bad_board_size", f"board_size {n} not accepted here")
    n, rules = _size_and_rules(record)
    allowed = tuple(allowed_rules)
    if rules.name not in allowed:
        raise ReplayError(
            "unsupported_rules", f"rules {rules} not accepted (accepted: {', '.join(allowed)})"
        )
    if len(record.moves) < min_moves:
        raise ReplayError("too_short", f"{len(record.moves)} moves, at least {min_moves} needed")
    if len(record.moves) > max_moves:
        raise ReplayError("too_long", f"{len(record.moves)} moves, at most {max_moves} allowed")
    return proto_to_board_replay(record, collect_features=collect_features)


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
