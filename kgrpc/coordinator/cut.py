"""A shard cut's file work: the games' journal entries read and written into one shard; and
the rebuild of the rolling window ``latest_games.npz`` that a cut makes due.

Runs in the coordinator's file work process (:mod:`kgrpc.coordinator.file_work`, not the
validation pool, whose replays uploads wait for) so that the
storage thread, which every upload's commit waits for, goes on storing games while a shard
of 50,000 rows is decoded, written, checksummed and hashed (about half a second at 19x19);
:meth:`kgrpc.coordinator.store.Store.plan_cut` chooses the games and
:meth:`~kgrpc.coordinator.store.Store.finish_cut` indexes the file, both on the storage
thread. Reading the journal from another process is safe: entries are appended and fsynced
before they are pending, and the journal is rewritten only by ``finish_cut``, after the
file work of the one cut in flight has ended. The window rebuild
(:meth:`~kgrpc.coordinator.store.Store.latest_due`) reads only indexed shards, which are
never changed, and writes its own file atomically: it may run beside a cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kgrpc import shards
from kgrpc.coordinator.journal import read_entries
from kgrpc.digest import file_digest


@dataclass(frozen=True)
class CutJob:
    """What :func:`write_cut` needs, in plain values (it crosses a process boundary)."""

    journal_path: str
    entries: list[tuple[int, int]]  # (offset, length) of each game's journal entry
    path: str  # the shard file to write
    board_size: int
    komi: float
    rules: str
    game_ids: list[str]


def write_cut(job: CutJob) -> tuple[int, str]:
    """Write the shard of ``job`` atomically and durably; return its size and sha256."""
    shards.write_shard_games(
        job.path,
        read_entries(Path(job.journal_path), job.entries),
        board_size=job.board_size,
        komi=job.komi,
        rules=job.rules,
        game_ids=job.game_ids,
    )
    return file_digest(Path(job.path))


WINDOW_NAME = "latest_games.npz"  # in training_data/current/


@dataclass(frozen=True)
class WindowJob:
    """What :func:`write_window` needs: the newest ``rows`` rows of ``sources`` (shard
    paths, oldest first) into ``path``."""

    path: str
    sources: list[str]
    rows: int
    board_size: int
    komi: float
    rules: str


def write_window(job: WindowJob) -> int:
    """Rebuild the window of ``job`` atomically (:func:`kgrpc.shards.write_window`); return
    the rows written. A job without sources (a token quarantine withholds every shard of its
    kind: kgrpc.coordinator.window_quarantine) removes the window, whose rows were those."""
    if not job.sources:
        Path(job.path).unlink(missing_ok=True)
        return 0
    return shards.write_window(
        job.path,
        job.sources,
        job.rows,
        board_size=job.board_size,
        komi=job.komi,
        rules=job.rules,
    )
