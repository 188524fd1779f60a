"""A replayed game record's training rows: :func:`training_rows`, the shard rows of
docs/formats.md section 4 (the shard files themselves are written by ``kgrpc.shards``).
"""

from __future__ import annotations

import numpy as np

from kgrpc.records.replay import ReplayResult, proto_to_board_replay
from kgrpc.v1 import records_pb2


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
