"""What the validation pool returns for each game (:class:`GameOutcome`).

A module of its own because the pool's processes import it: it must not pull in the store,
the workers table or grpc, which a replay never uses (each would cost every pool process
memory; tests/test_validation_imports.py checks that a pool process loads no grpc).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kgrpc.coordinator.journal import decode_payload


@dataclass
class GameOutcome:
    """A validated (or rejected) game, as the validation pool returns it."""

    game_id: str
    worker_id: str
    ok: bool
    reason: str = ""
    detail: str = ""
    board_size: int = 0
    komi: float = 0.0
    rules: str = ""
    positions: int = 0
    # The training rows: as arrays, or as the journal payload the validation pool encoded
    # them to (journal.encode_payload; then ``rows`` is empty). ``row_arrays()`` gives either.
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    payload: bytes = b""
    # (kept_games.KeptGame, SGF bytes) of an accepted game the archive keeps, rendered in the
    # validation pool so the coordinator's event loop does not parse and render it again.
    kept: Any = None
    # The result the replay established (an accepted game): the winner as a kgrpc.v1.Color
    # (0 for a draw) and the score, black's view. A gating game counts these, not the
    # figures its report claims.
    winner: int = 0
    score: float = 0.0

    def row_arrays(self) -> dict[str, np.ndarray]:
        return decode_payload(self.payload) if self.payload and not self.rows else self.rows

    def journal_payload(self) -> Mapping[str, np.ndarray] | bytes:
        return self.payload or self.rows
