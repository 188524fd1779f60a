"""The rolling window ``latest_games.npz`` follows the token quarantine.

Every rebuild of the window (:meth:`kgrpc.coordinator.shard_cuts.ShardCuts.window_job`) leaves
out, as ``ListShards`` does, the shards that hold games of a quarantined token
(:func:`kgrpc.coordinator.quorum.excluded_shards`, the one rule every reader of the shards
follows); a window with no shard left is removed (:func:`kgrpc.coordinator.cut.write_window`).
But a rebuild happens at a cut, and a quarantine is set or lifted by ``kgrpc-coordinator token
quarantine`` from another process, straight in the index, often when no cut is near (the
token's uploads may have stopped with it). So :class:`QuarantineFollower` reads the quarantine
table at each tick of ingest's flush loop (``Ingest.follow_quarantine``: at most a minute
apart, a quarter of ``flush_interval_s``) and, when it changed since the last tick, checks the
window file against what it should now hold (:func:`stale`) and hands ingest a rebuild if it
differs: the window then holds none of the token's rows, or all of them again after
``token unquarantine``. Nothing else changes: the shards and the games stay where they are.

At the first tick after a start the window is checked whatever the table says, since a
quarantine may have been set or lifted while the coordinator was stopped; the check reads only
the window's small members (its game ids and kind) and the index, and a rebuild follows only
when the window is not what it should be.

Runs on the storage thread (the index connection of :class:`kgrpc.coordinator.store.Store`);
its SQL runs unchanged on SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kgrpc.coordinator import cut, quorum

if TYPE_CHECKING:
    from kgrpc.coordinator.store import Store

log = logging.getLogger("kgrpc.coordinator")

Kind = tuple[int, float, str]  # (board size, komi, rules): the shards a window is made of


def _window_members(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """Small members of the window file (an uncompressed .npz: each read on its own); None
    when there is no file or it cannot be read (a rebuild replaces it)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in keys}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError) as exc:
        log.warning("latest_games.npz unreadable (%s): rebuilt", exc)
        return None


def window_kind(store: Store) -> Kind | None:
    """The kind of the window file, else that of the run's newest shard (the kind the next
    cut's rebuild would write); None for a run without shards."""
    found = _window_members(store.current_dir / cut.WINDOW_NAME, ("board_size", "komi", "rules"))
    if found is not None:
        return int(found["board_size"]), float(found["komi"]), str(found["rules"])
    row = store.conn.execute(
        "SELECT board_size, komi, rules FROM shards WHERE run = ? ORDER BY idx DESC LIMIT 1",
        (store.run,),
    ).fetchone()
    return None if row is None else (int(row[0]), float(row[1]), str(row[2]))


def _games_of(store: Store, names: list[str]) -> dict[str, set[str]]:
    """The game ids of the run's shards ``names`` (file names), by shard."""
    out: dict[str, set[str]] = {n: set() for n in names}
    if not names:
        return out
    marks = ", ".join("?" * len(names))
    for r in store.conn.execute(
        "SELECT s.file_name, g.game_id FROM shards s JOIN games g "
        "ON g.run = s.run AND g.shard_index = s.idx "
        f"WHERE s.run = ? AND s.file_name IN ({marks})",
        (store.run, *names),
    ):
        out[r[0]].add(str(r[1]))
    return out


def stale(store: Store, job: cut.WindowJob) -> bool:
    """Whether the window file differs from what ``job`` (the rebuild as it would be now)
    writes: it holds a game of no source (a withheld shard's, or one older than the window
    now reaches), or lacks one of a source other than the oldest (the window's cut falls
    inside that one); a missing file is stale when there is something to write."""
    found = _window_members(Path(job.path), ("game_ids",))
    if found is None:
        return bool(job.sources)
    held = {str(g) for g in found["game_ids"]}
    if not job.sources:
        return True  # every shard of its kind is withheld: the file must go
    names = [Path(s).name for s in job.sources]  # oldest first
    by_shard = _games_of(store, names)
    may = set().union(*by_shard.values())
    must = set().union(*(by_shard[n] for n in names[1:]))
    return not (must <= held <= may)


class QuarantineFollower:
    """Hands a rebuild of latest_games.npz when a quarantine set or lifted since the last tick
    changes what the window should hold (module docstring)."""

    def __init__(self) -> None:
        self._seen: dict[int, int] | None = None  # token -> since_ms at the last tick

    def due(self, store: Store) -> cut.WindowJob | None:
        """On the storage thread, at each tick: the rebuild to run, or None."""
        mark = quorum.quarantined_since(store.conn)
        if mark == self._seen:
            return None
        kind = window_kind(store)
        job = None if kind is None else store.window_job(*kind)
        self._seen = mark  # only once read: an index that failed is read again next tick
        if job is None or not stale(store, job):
            return None
        log.info(
            "latest_games.npz rebuilt for the token quarantine (%d tokens quarantined)",
            len(mark),
        )
        return job
