"""Coordinator storage (index, shards, the rolling window) when a write or a commit fails
part-way, and the shard cut whose file work runs elsewhere (test_coordinator_journal.py: the
ingest journal).

These drive :class:`kgrpc.coordinator.store.Store` directly, without a server: each test makes
one step fail (disk full, a locked database), carries on or restarts, and checks that every
acknowledged game ends up in exactly one shard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kgrpc.coordinator import cut
from kgrpc.coordinator import journal as journal_mod
from kgrpc.coordinator.store import GameOutcome, Store
from tests.ingest_helpers import RUN, check_shards, shard_game_ids, validated_games


@pytest.fixture(scope="module")
def outcomes() -> list[GameOutcome]:
    return validated_games(6, seed=31)


@pytest.mark.parametrize("restart", [False, True])
def test_failed_index_commit_then_retry_stores_each_game_once(tmp_path, outcomes, restart) -> None:
    store = Store(tmp_path, RUN, positions_per_shard=10**9)
    real_insert = store._insert_game

    def locked(*args: object) -> None:
        store._insert_game = real_insert  # type: ignore[method-assign]
        raise sqlite3.OperationalError("database is locked")

    store._insert_game = locked  # type: ignore[method-assign]
    with pytest.raises(sqlite3.OperationalError):
        store.ingest(outcomes[:3])  # journalled, but the commit fails: no ack
    assert store.ingest(outcomes[:3]) == ["accepted"] * 3  # the worker retries
    if restart:
        store.close()
        store = Store(tmp_path, RUN, positions_per_shard=10**9)
    store.flush_all()
    assert store.counters()["games_accepted"] == 3
    store.close()
    assert Counter(shard_game_ids(tmp_path)) == Counter(o.game_id for o in outcomes[:3])


def test_recovery_keeps_one_journal_entry_per_game(tmp_path, outcomes) -> None:
    # Two entries of one game (a failed commit whose entries could not be cut back, then
    # the retry): the restart must shard the game once, and a second restart changes nothing.
    store = Store(tmp_path, RUN, positions_per_shard=10**9)
    store.ingest(outcomes[:2])
    o = outcomes[0]
    store.journal.append(
        [
            (
                dict(
                    game_id=o.game_id,
                    worker_id=o.worker_id,
                    board_size=o.board_size,
                    komi=o.komi,
                    rules=o.rules,
                    positions=o.positions,
                ),
                o.journal_payload(),
            )
        ]
    )
    store.close()
    for _ in range(2):
        store = Store(tmp_path, RUN, positions_per_shard=10**9)
        assert store.recovery.pending_games == 2
        store.close()
    store = Store(tmp_path, RUN, positions_per_shard=10**9)
    store.flush_all()
    store.close()
    assert Counter(shard_game_ids(tmp_path)) == Counter(x.game_id for x in outcomes[:2])


@pytest.mark.parametrize("failing", ["index", "journal_rewrite", "journal_dir_fsync"])
def test_shard_cut_that_fails_part_way_stores_each_game_once(
    tmp_path, outcomes, monkeypatch, failing
) -> None:
    store = Store(tmp_path, RUN, positions_per_shard=300)  # two shards of three games
    if failing == "index":
        target, name, exc = store, "_index_shard", sqlite3.OperationalError("database is locked")
    elif failing == "journal_rewrite":
        target, name, exc = (
            store.journal,
            "rewrite",
            OSError(errno.ENOSPC, "No space left on device"),
        )
    else:  # after the journal's rename, before its directory fsync
        target, name, exc = journal_mod, "fsync_dir", OSError(errno.EIO, "Input/output error")
    real = getattr(target, name)

    def fail_once(*args: object, **kwargs: object) -> None:
        monkeypatch.setattr(target, name, real)
        raise exc

    monkeypatch.setattr(target, name, fail_once)
    store.ingest(outcomes)
    with contextlib.suppress(OSError, sqlite3.Error):  # the server logs it and cuts again later
        store.cut_ready()
    if failing == "index":  # the unindexed file is gone at once: a trainer never sees it
        assert Counter(shard_game_ids(tmp_path)) == Counter()
    store.cut_ready()
    store.flush_all()
    check_shards(tmp_path, outcomes)  # while running
    store.close()
    store = Store(tmp_path, RUN, positions_per_shard=300)
    store.flush_all()
    assert store.recovery.pending_games == 0 and store.counters()["games_accepted"] == len(outcomes)
    store.close()
    check_shards(tmp_path, outcomes)  # after a restart


def test_index_restored_from_an_older_backup_adopts_shards_without_resharding(
    tmp_path, outcomes
) -> None:
    # docs/coordinator.md "Backup": the index is copied first, then ingest/, then training_data/.
    # A game accepted after the index copy and cut into a shard after the journal copy is in
    # both the shard and the copied journal, but not in the index.
    live, restored = tmp_path / "live", tmp_path / "restored"
    Store(live, RUN).close()
    (restored / "ingest").mkdir(parents=True)
    shutil.copy(live / "coordinator.sqlite3", restored / "coordinator.sqlite3")  # index copy
    store = Store(live, RUN, positions_per_shard=10**9)
    store.ingest(outcomes[:3])
    store.close()
    shutil.copy(
        live / "ingest" / "journal.bin", restored / "ingest" / "journal.bin"
    )  # journal copy
    store = Store(live, RUN, positions_per_shard=10**9)
    store.flush_all()
    store.close()
    shutil.copytree(live / "training_data", restored / "training_data")  # shards copy
    for _ in range(2):  # recovery is idempotent
        store = Store(restored, RUN, positions_per_shard=10**9)
        assert store.recovery.pending_games == 0
        store.flush_all()
        assert store.counters()["games_accepted"] == 3
        assert store.ingest(outcomes[:1]) == ["duplicate"]
        store.close()
    check_shards(restored, outcomes[:3])


def test_failed_commit_does_not_leave_the_connection_in_a_transaction(tmp_path) -> None:
    from kgrpc.coordinator import db

    conn = db.connect(tmp_path)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE child (pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
    )
    with pytest.raises(sqlite3.IntegrityError), db.transaction(conn):
        conn.execute("INSERT INTO child VALUES (1)")  # checked at COMMIT, which fails
    assert not conn.in_transaction
    with db.transaction(conn):  # the next transaction works
        conn.execute("INSERT INTO parent VALUES (1)")
    assert conn.execute("SELECT COUNT(*) FROM child").fetchone()[0] == 0
    conn.close()


@pytest.mark.parametrize("damage", ["truncated", "not_a_zip", "bad_game_index"])
def test_unreadable_unindexed_shard_is_quarantined_at_start(
    tmp_path, outcomes, caplog, damage
) -> None:
    store = Store(tmp_path, RUN, positions_per_shard=10**9)
    store.ingest(outcomes[:2])
    store.flush_all()  # games_00001.npz, indexed
    store.ingest(outcomes[2:4])  # pending in the journal
    store.close()
    run_dir = tmp_path / "training_data" / RUN
    good = (run_dir / "games_00001.npz").read_bytes()
    bad = run_dir / "games_00002.npz"  # e.g. a partial copy of a shard, not in the index
    if damage == "truncated":
        bad.write_bytes(good[: len(good) // 2])
    elif damage == "not_a_zip":
        bad.write_bytes(b"\0" * 1000)
    else:
        with np.load(run_dir / "games_00001.npz") as z:
            data = {k: z[k] for k in z.files}
        data["game_index"] = data["game_index"] + 5
        np.savez(bad, **data)
    with caplog.at_level("ERROR", logger="kgrpc.coordinator.store"):
        store = Store(tmp_path, RUN, positions_per_shard=10**9)  # starts
    assert store.recovery.quarantined_shards == ["games_00002.npz.corrupt"]
    assert store.recovery.adopted_shards == []
    assert not bad.exists() and (run_dir / "games_00002.npz.corrupt").exists()
    assert any(
        "games_00002.npz" in r.getMessage() for r in caplog.records if r.levelname == "ERROR"
    )
    assert store.recovery.pending_games == 2
    store.flush_all()
    store.close()
    check_shards(tmp_path, outcomes[:4])
    store = Store(tmp_path, RUN, positions_per_shard=10**9)  # and again: nothing left to quarantine
    assert store.recovery.quarantined_shards == []
    store.close()


@pytest.mark.parametrize("refresh_s", [0.0, 3600.0])
def test_rolling_window_is_rebuilt_at_most_once_per_refresh(tmp_path, outcomes, refresh_s) -> None:
    """latest_games.npz is rebuilt at a shard cut unless the last rebuild of the group is
    younger than latest_refresh_s (each rebuild rewrites the whole window)."""
    store = Store(tmp_path, RUN, positions_per_shard=10**9, latest_refresh_s=refresh_s)
    latest = tmp_path / "training_data" / "current" / "latest_games.npz"
    store.ingest(outcomes[:3])
    store.flush_all()
    first = {str(g) for g in np.load(latest)["game_ids"]}
    assert first == {o.game_id for o in outcomes[:3]}
    store.ingest(outcomes[3:])
    store.flush_all()
    store.close()
    now = {str(g) for g in np.load(latest)["game_ids"]}
    assert now == (first if refresh_s else {o.game_id for o in outcomes})
    assert Counter(shard_game_ids(tmp_path)) == Counter(
        o.game_id for o in outcomes
    )  # shards are all there


def test_rolling_window_rebuild_is_file_work_a_caller_runs_elsewhere(tmp_path, outcomes) -> None:
    """The coordinator finishes a cut without rebuilding latest_games.npz on its storage thread
    and runs the job latest_due hands it in the validation pool: the job is plain values (it
    crosses a process boundary) and writes the same window the store would have."""
    import pickle

    store = Store(tmp_path, RUN, positions_per_shard=10**9, latest_refresh_s=3600.0)
    latest = tmp_path / "training_data" / "current" / "latest_games.npz"
    store.ingest(outcomes[:3])
    plan = store.plan_cut(older_than_s=0.0)
    assert plan is not None
    store.finish_cut(plan, cut.write_cut(plan.job))
    assert not latest.exists()
    forced = dataclasses.replace(plan, latest=False)  # a group cut early: never a rebuild,
    assert store.latest_due(forced) is None  # and it does not use up the one that is due
    job = store.latest_due(plan)
    assert job is not None and store.latest_due(plan) is None  # counted as done when handed out
    job = pickle.loads(pickle.dumps(job))
    assert cut.write_window(job) == sum(o.positions for o in outcomes[:3])
    assert {str(g) for g in np.load(latest)["game_ids"]} == {o.game_id for o in outcomes[:3]}
    store.close()


def test_games_stored_while_a_cut_runs_stay_pending_for_the_next(tmp_path, outcomes) -> None:
    # The server runs a cut's file work in the validation pool while the storage thread goes
    # on storing games: the shard holds the planned games only, the others wait for the next.
    store = Store(tmp_path, RUN, positions_per_shard=300)  # two shards of three games
    store.ingest(outcomes[:4])
    plan = store.plan_cut()
    assert plan is not None and [e.game_id for e in plan.take] == [o.game_id for o in outcomes[:3]]
    assert store.plan_cut(older_than_s=0.0) is None  # one cut at a time
    store.ingest(outcomes[4:])
    written = cut.write_cut(plan.job)
    record = store.finish_cut(plan, written)
    assert record.games == 3 and (record.size_bytes, record.sha256) == written
    assert Counter(shard_game_ids(tmp_path)) == Counter(o.game_id for o in outcomes[:3])
    assert sorted(e.game_id for q in store.pending.values() for e in q) == sorted(
        o.game_id for o in outcomes[3:]
    )
    store.flush_all()
    check_shards(tmp_path, outcomes)
    store.close()
    store = Store(tmp_path, RUN, positions_per_shard=300)
    assert store.recovery.pending_games == 0
    store.close()


def test_a_cut_whose_file_work_fails_leaves_no_file_and_its_games_pending(
    tmp_path, outcomes
) -> None:
    store = Store(tmp_path, RUN, positions_per_shard=300)
    store.ingest(outcomes)
    plan = store.plan_cut()
    assert plan is not None
    Path(plan.job.path).write_bytes(b"PK cut short")  # what a failing disk may leave
    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(OSError, match="No space"):
        store.abort_cut(plan, full)  # raised on the storage thread, as its own writes are
    assert not Path(plan.job.path).exists()
    assert sum(len(q) for q in store.pending.values()) == len(outcomes)
    store.flush_all()  # the next cuts take the same games
    check_shards(tmp_path, outcomes)
    store.close()
