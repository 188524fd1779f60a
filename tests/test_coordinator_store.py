"""Coordinator storage (journal, index, shards) when a write or a commit fails part-way.

These drive :class:`kgrpc.coordinator.store.Store` directly, without a server: each test makes
one step fail (disk full, a locked database), carries on or restarts, and checks that every
acknowledged game ends up in exactly one shard.
"""

from __future__ import annotations

import errno
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kgrpc.coordinator import journal as journal_mod
from kgrpc.coordinator import validate
from kgrpc.coordinator.journal import Journal
from kgrpc.coordinator.store import GameOutcome
from kgrpc.randgame import make_random_games

RUN = "run_001"


@pytest.fixture(scope="module")
def outcomes() -> list[GameOutcome]:
    settings = validate.ValidationSettings()
    out = [validate.validate_record_bytes(g.SerializeToString(), "w-test", settings) for g in make_random_games(6, 9, seed=31)]
    assert all(o.ok for o in out)
    return out


def shard_ids(data_dir: Path) -> Counter[str]:
    ids: Counter[str] = Counter()
    for p in sorted((data_dir / "training_data" / RUN).glob("games_*.npz")):
        with np.load(p) as z:
            ids.update(str(g) for g in z["game_ids"])
    return ids


def meta(game_id: str) -> dict[str, object]:
    return {"game_id": game_id, "worker_id": "w", "board_size": 9, "komi": 7.5, "rules": "chinese", "positions": 3}


ROWS = {"value": np.zeros(3, np.float32)}


def test_failed_journal_append_leaves_no_garbage_before_the_next_entry(tmp_path, monkeypatch) -> None:
    path = tmp_path / "journal.bin"
    j = Journal(path)
    j.append([(meta("a"), ROWS)])
    real_write = journal_mod.os.write

    def half_then_full(fd: int, data: bytes) -> int:
        monkeypatch.setattr(journal_mod.os, "write", real_write)
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal_mod.os, "write", half_then_full)
    with pytest.raises(OSError):
        j.append([(meta("b"), ROWS)])  # never acknowledged
    (c,) = j.append([(meta("c"), ROWS)])  # acknowledged after its fsync
    assert j.read(c)["value"].shape == (3,)
    j.close()
    assert [e.game_id for e in Journal(path).entries] == ["a", "c"]
