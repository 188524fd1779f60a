"""Legal random games as ``GameRecord`` protos, for tests, benchmarks and demos, and their
positions as a net's inputs (:func:`random_positions`: int8 calibration, parity checks).

:func:`make_random_game` plays uniformly random legal moves that never fill the
mover's own single-point eye (so games end by two passes), until both pass or the
move cap (by default the cap of a coordinator with default settings). Each move gets a
plausible ``SearchTarget``: a sparse distribution over a few legal moves (the played move,
pass, and up to two other legal points) that sums to 1, with the played move's visits. The
result (score under the game's rules, winner, area ownership) is the rules engine's own, so
the record passes the coordinator's validation (a game cut at another ``max_moves`` than the
coordinator's cap is rejected there as ``unfinished``).
"""

from __future__ import annotations

import random
import uuid

import numpy as np

from kgrpc.go.board import Board
from kgrpc.go.playout import random_move
from kgrpc.go.rules import Rules
from kgrpc.records.build import RECORD_FORMAT_VERSION
from kgrpc.records.terms import move_cap
from kgrpc.v1 import common_pb2, records_pb2


def default_max_moves(board_size: int) -> int:
    """The move cap of a coordinator with default settings (records.move_cap): a game that
    does not end by two passes stops there, as a worker's would."""
    return move_cap(board_size)


def make_random_game(
    board_size: int = 9,
    rules: str = "chinese",
    komi: float = 7.5,
    seed: int = 0,
    *,
    max_moves: int | None = None,
    full_search_prob: float = 1.0,
    game_id: str | None = None,
    worker_id: str = "",
    task_id: str = "",
    model: str = "random",
) -> records_pb2.GameRecord:
    """A legal game with consistent targets, result and ownership (deterministic per seed).

    ``game_id`` defaults to a UUID derived from ``seed`` (same seed -> same id), so a
    test can re-send the same game to check duplicate handling.
    """
    rng = random.Random(seed)
    rule_set = Rules.from_name(rules)
    board = Board(board_size, rule_set, komi)
    cap = default_max_moves(board_size) if max_moves is None else max_moves
    nn = board.num_points
    record = records_pb2.GameRecord(
        game_id=game_id or str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        rules=rule_set.to_proto(),
        komi=komi,
        board_size=board_size,
        black_model=model,
        white_model=model,
        worker_id=worker_id,
        task_id=task_id,
        finished_unix_ms=1_700_000_000_000 + seed,
        format_version=RECORD_FORMAT_VERSION,
    )
    while not board.is_over() and len(board.moves) < cap:
        move = random_move(board, rng)
        candidates = [move]
        if move != nn:
            candidates.append(nn)
        for _ in range(2):
            p = rng.randrange(nn)
            if p not in candidates and board.is_legal(p):
                candidates.append(p)
        weights = np.array([rng.random() + 0.05 for _ in candidates], dtype=np.float64)
        weights[0] += 1.0  # the played move carries most of the visits
        probs = (weights / weights.sum()).astype(np.float32)
        mover = 1.0 if (len(board.moves) % 2 == 0) else -1.0
        record.targets.append(
            records_pb2.SearchTarget(
                full_search=rng.random() < full_search_prob,
                visits=200,
                policy_moves=candidates,
                policy_probs=probs.tolist(),
                root_value=float(np.tanh(rng.gauss(0.0, 0.3))),
                root_score=mover * rng.gauss(0.0, 5.0),
                played_visits=max(1, round(200 * float(probs[0]))),
            )
        )
        record.moves.append(move)
        board.play(move)
    score = board.score()
    winner = (
        common_pb2.COLOR_BLACK
        if score > 0
        else common_pb2.COLOR_WHITE
        if score < 0
        else common_pb2.COLOR_UNSPECIFIED
    )
    record.result.CopyFrom(
        records_pb2.GameResult(
            winner=winner,
            score=score,
            ownership=[int(x) for x in board.area_ownership()],
        )
    )
    return record


def make_random_games(
    count: int, board_size: int = 9, seed: int = 0, **kwargs: object
) -> list[records_pb2.GameRecord]:
    """``count`` games with seeds ``seed, seed+1, ...``."""
    return [make_random_game(board_size, seed=seed + i, **kwargs) for i in range(count)]  # type: ignore[arg-type]


def random_positions(board_size: int, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` positions of legal random games (several per game, at random depths), encoded
    as a net's inputs: float32 planes [count, NUM_PLANES, N, N] and globals [count, NUM_GLOBALS]
    (C-contiguous).
    For int8 calibration and parity checks where no real positions are at hand."""
    from kgrpc.go.features import encode

    rng = random.Random(seed)
    planes, globals_ = [], []
    rules = ("chinese", "japanese", "tromp-taylor")
    longest = 2 * board_size * board_size
    while len(planes) < count:
        board = Board(board_size, Rules.from_name(rng.choice(rules)), rng.choice((6.5, 7.5)))
        stops = sorted(rng.randrange(longest) for _ in range(8))
        for stop in stops:
            while not board.is_over() and len(board.moves) < stop:
                board.play(random_move(board, rng))
            p, g = encode(board)
            planes.append(p.astype(np.float32))
            globals_.append(g)
            if board.is_over() or len(planes) >= count:
                break
    # encode() gives strided views: without the copy torch meets channels-last strides and
    # takes its slow paths (BatchNorm in training ran 50x slower).
    return (
        np.ascontiguousarray(np.stack(planes)),
        np.ascontiguousarray(np.stack(globals_), dtype=np.float32),
    )
