"""Shared by the record tests (tests/test_records*.py) and the coordinator's ingest tests: a
random game played to the end with a plausible target at every move, its record through the
wire format, and the edits the tests make to a good record (cut short, the played move's share
dropped)."""

from __future__ import annotations

import random

import numpy as np

from kgrpc.go.board import Board
from kgrpc.go.playout import random_move
from kgrpc.go.rules import PRESETS
from kgrpc.records.build import game_to_proto, make_target
from kgrpc.records.terms import move_cap
from kgrpc.v1 import records_pb2


def play_game(size: int, seed: int, rules_name: str = "chinese", komi: float = 7.5):
    """A random game to the end with a plausible sparse target at every move."""
    rng = random.Random(seed)
    board = Board(size, PRESETS[rules_name], komi)
    targets = []
    positions = []
    while not board.is_over() and board.move_number < move_cap(size):
        move = random_move(board, rng)
        legal = [m for m in np.flatnonzero(board.legal_mask()).tolist() if m != move]
        chosen = [move, *rng.sample(legal, min(2, len(legal)))]
        weights = np.array([rng.random() + 0.1 for _ in chosen])
        weights /= weights.sum()
        full = rng.random() < 0.6
        visits = 100 if full else 16
        targets.append(
            make_target(
                dict(zip(chosen, weights.tolist(), strict=True)),
                visits=visits,
                root_value=rng.uniform(-1, 1),
                root_score=rng.uniform(-10, 10),
                full_search=full,
                played_visits=max(1, round(visits * weights[0])),
            )
        )
        positions.append(board.copy())
        board.play(move)
    return board, targets, positions


def record_of(size=9, seed=1, **kw) -> tuple[records_pb2.GameRecord, Board, list[Board]]:
    board, targets, positions = play_game(size, seed, **kw)
    rec = game_to_proto(board, targets, game_id=f"g{seed}", black_model="m1", white_model="m2")
    # Through the wire format, as the coordinator sees it.
    return records_pb2.GameRecord.FromString(rec.SerializeToString()), board, positions


def good_record() -> records_pb2.GameRecord:
    """A 9x9 record (seed 2) that passes every check, ended by two passes."""
    return record_of(9, 2)[0]


def first_full(r) -> int:
    return next(i for i, t in enumerate(r.targets) if t.full_search)


def drop_played(r, i: int) -> None:
    """Move target i's share of the played move onto its other moves, played_visits 0."""
    t = r.targets[i]
    pairs = zip(t.policy_moves, t.policy_probs, strict=True)
    probs = [0.0 if m == r.moves[i] else p for m, p in pairs]
    t.ClearField("policy_probs")
    t.policy_probs.extend([p / sum(probs) for p in probs])
    t.played_visits = 0


def played_unvisited(r):
    # Issue 11, item 10: a full-search target that gives the played move no probability.
    drop_played(r, first_full(r))


def cut(r, k: int) -> None:
    """Cut ``r`` to ``k`` moves and give it the result of that position (area score and
    ownership, as if it had been played out): only its length gives it away."""
    board = Board(r.board_size, komi=r.komi)
    for m in r.moves[:k]:
        board.play(m)
    del r.moves[k:]
    del r.targets[k:]
    r.result.CopyFrom(game_to_proto(board, list(r.targets), game_id=r.game_id).result)
