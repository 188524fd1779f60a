"""What a game kept as SGF is: its ``sgf_games`` row (:class:`KeptGame`), its kind, the file
name it is stored under, whether a self-play game is chosen, and its SGF.

The SGF is :func:`kgrpc.sgf.record_to_sgf` of the uploaded record: rules, komi, the model
names as players, the result, and each move's root value and visits (private properties and
a comment). Model names and game ids come from workers: one is used as a file name only when
it is a plain one (letters, digits, ``_ . -``, not starting with a dot, at most 64
characters), any other becomes ``x-`` and 16 hex digits of its sha256 (:func:`safe_name`).
Self-play games are chosen by a hash of their id (:func:`selected`), so a game sent again is
chosen again.

Split from :mod:`kgrpc.coordinator.archive` (the writer) because the validation pool's
processes render the SGF of the games the archive keeps (:mod:`kgrpc.coordinator.validate`):
they import this module alone, with neither the writer, the index nor the blob store.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kgrpc.coordinator.errors import invalid
from kgrpc.go.board import BLACK, WHITE
from kgrpc.records.replay import ReplayResult
from kgrpc.sgf import record_to_sgf, result_string
from kgrpc.v1 import common_pb2, coordinator_pb2, records_pb2

KINDS = ("selfplay", "gating")
KIND_TO_PROTO = {
    "selfplay": coordinator_pb2.GAME_KIND_SELFPLAY,
    "gating": coordinator_pb2.GAME_KIND_GATING,
}
PROTO_TO_KIND = {v: k for k, v in KIND_TO_PROTO.items()}
SAFE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def kind_from_proto(value: int) -> str:
    """``selfplay``, ``gating``, or "" (all) for GAME_KIND_UNSPECIFIED; INVALID_ARGUMENT else."""
    if value == coordinator_pb2.GAME_KIND_UNSPECIFIED:
        return ""
    if value not in PROTO_TO_KIND:
        raise invalid(f"unknown game kind {value}")
    return PROTO_TO_KIND[value]


def safe_name(text: str) -> str:
    """``text`` when it is a plain file name, else ``x-`` + 16 hex digits of its sha256."""
    if SAFE_NAME_RE.fullmatch(text):
        return text
    return "x-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def selected(game_id: str, share: float) -> bool:
    """Whether a self-play game is kept: the same answer for the same id, a ``share`` of ids."""
    if share >= 1.0:
        return True
    if share <= 0.0:
        return False
    h = int.from_bytes(hashlib.sha256(game_id.encode()).digest()[:8], "big")
    return h < share * 2.0**64


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class KeptGame:
    """One ``sgf_games`` row."""

    game_id: str
    kind: str
    model: str
    black: str
    white: str
    board_size: int
    komi: float
    moves: int
    result: str
    worker_id: str
    finished_ms: int
    stored_ms: int
    path: str  # relative to DATA_DIR/sgf
    seq: int = 0
    # With a remote blob store: the pack object holding the SGF, and where (sgf_packs.py).
    pack: str = ""
    pack_offset: int = 0
    pack_length: int = 0

    def to_proto(self) -> coordinator_pb2.GameSummary:
        return coordinator_pb2.GameSummary(
            game_id=self.game_id,
            seq=self.seq,
            kind=KIND_TO_PROTO[self.kind],
            model=self.model,
            black_model=self.black,
            white_model=self.white,
            board_size=self.board_size,
            moves=self.moves,
            result=self.result,
            worker_id=self.worker_id,
            finished_unix_ms=self.finished_ms,
            stored_unix_ms=self.stored_ms,
            komi=self.komi,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "game_id": self.game_id,
            "seq": self.seq,
            "kind": self.kind,
            "model": self.model,
            "black": self.black,
            "white": self.white,
            "board_size": self.board_size,
            "komi": self.komi,
            "moves": self.moves,
            "result": self.result,
            "worker_id": self.worker_id,
            "finished_ms": self.finished_ms,
            "stored_ms": self.stored_ms,
        }


def prepare(
    record: records_pb2.GameRecord,
    kind: str,
    model: str,
    worker_id: str,
    replay: ReplayResult | None = None,
) -> tuple[KeptGame, bytes]:
    """The index row and the SGF bytes of one game (``replay``: its validation's replay,
    which holds the per-move values the SGF shows)."""
    res = record.result
    winner = {common_pb2.COLOR_BLACK: BLACK, common_pb2.COLOR_WHITE: WHITE}.get(res.winner, 0)
    stored = now_ms()
    game = KeptGame(
        game_id=record.game_id,
        kind=kind,
        model=model,
        black=record.black_model,
        white=record.white_model,
        board_size=record.board_size,
        komi=record.komi,
        moves=len(record.moves),
        result=result_string(winner, res.score, res.resigned),
        worker_id=worker_id,
        finished_ms=record.finished_unix_ms or stored,
        stored_ms=stored,
        path=f"{safe_name(model)}/{kind}/{safe_name(record.game_id)}.sgf",
    )
    return game, record_to_sgf(record, replay).encode()


def prepare_selfplay(items: Sequence[tuple[bytes, str]]) -> list[tuple[KeptGame, bytes]]:
    """Rows and SGF bytes of serialized self-play games (already validated)."""
    out = []
    for data, worker_id in items:
        rec = records_pb2.GameRecord()
        rec.ParseFromString(data)
        out.append(prepare(rec, "selfplay", rec.black_model, worker_id))
    return out
