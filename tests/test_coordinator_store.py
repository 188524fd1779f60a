"""Coordinator storage (journal, index, shards) when a write or a commit fails part-way.

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

from kgrpc.coordinator import cut, validate
from kgrpc.coordinator import journal as journal_mod
from kgrpc.coordinator.journal import Journal
from kgrpc.coordinator.store import GameOutcome, Store
from kgrpc.randgame import make_random_games

RUN = "run_001"


@pytest.fixture(scope="module")
def outcomes() -> list[GameOutcome]:
    settings = validate.ValidationSettings(require_task=False)  # storage is tested here
    out = [
        validate.validate_record_bytes(g.SerializeToString(), "w-test", settings)
        for g in make_random_games(6, 9, seed=31)
    ]
    assert all(o.ok for o in out)
    return out


def shard_ids(data_dir: Path) -> Counter[str]:
    ids: Counter[str] = Counter()
    for p in sorted((data_dir / "training_data" / RUN).glob("games_*.npz")):
        with np.load(p) as z:
            ids.update(str(g) for g in z["game_ids"])
    return ids


def meta(game_id: str) -> dict[str, object]:
    return {
        "game_id": game_id,
        "worker_id": "w",
        "board_size": 9,
        "komi": 7.5,
        "rules": "chinese",
        "positions": 3,
    }


ROWS = {"value": np.zeros(3, np.float32)}


def test_failed_journal_append_leaves_no_garbage_before_the_next_entry(
    tmp_path, monkeypatch
) -> None:
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
    assert shard_ids(tmp_path) == Counter(o.game_id for o in outcomes[:3])


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
    assert shard_ids(tmp_path) == Counter(x.game_id for x in outcomes[:2])


def check_shards(data_dir: Path, outcomes: list[GameOutcome]) -> None:
    """Every game in exactly one shard, with its own rows."""
    by_id = {o.game_id: o for o in outcomes}
    seen: Counter[str] = Counter()
    for p in sorted((data_dir / "training_data" / RUN).glob("games_*.npz")):
        with np.load(p) as z:
            for gi, gid in enumerate(z["game_ids"]):
                seen[str(gid)] += 1
                sel = z["game_index"] == gi
                rows = by_id[str(gid)].row_arrays()
                np.testing.assert_array_equal(z["states"][sel], rows["states"])
                np.testing.assert_array_equal(z["value"][sel], rows["value"])
    assert seen == Counter(list(by_id))


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
        assert shard_ids(tmp_path) == Counter()
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


def _journal_of(path: Path, ids: list[str]) -> list[int]:
    """A journal holding one entry per id; returns the entries' offsets."""
    j = Journal(path)
    entries = j.append([(meta(g), ROWS) for g in ids])
    j.close()
    return [e.offset for e in entries]


@pytest.mark.parametrize("where", ["payload", "header_length", "magic"])
def test_damage_in_the_middle_of_the_journal_is_kept_and_reported(tmp_path, caplog, where) -> None:
    path = tmp_path / "journal.bin"
    offsets = _journal_of(path, ["a", "b", "c", "d"])
    data = bytearray(path.read_bytes())
    b = offsets[1]
    if where == "payload":
        data[offsets[2] - 5] ^= 0xFF  # inside b's payload: its CRC fails
    elif where == "header_length":
        data[b + 8 : b + 16] = (10**9).to_bytes(8, "little")  # b claims to run past the end
    else:
        data[b : b + 4] = b"XXXX"
    path.write_bytes(bytes(data))
    with caplog.at_level("ERROR", logger="kgrpc.coordinator.journal"):
        j = Journal(path)
    # nothing after the damage is thrown away with it
    assert [e.game_id for e in j.entries] == ["a", "c", "d"]
    assert all(j.read(e)["value"].shape == (3,) for e in j.entries)
    (copy,) = tmp_path.glob("journal.bin.damaged-*")
    assert copy.read_bytes() == bytes(data)  # the damaged file, untouched
    assert (
        j.damage is not None
        and j.damage.dropped_bytes == offsets[2] - b
        and j.damage.salvaged_entries == 2
    )
    (err,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert f"{offsets[2] - b} damaged bytes" in err and copy.name in err
    (e,) = j.append([(meta("e"), ROWS)])
    assert j.read(e)["value"].shape == (3,)
    j.close()
    again = Journal(path)  # the rewritten journal is clean: no second copy
    assert [x.game_id for x in again.entries] == ["a", "c", "d", "e"] and again.damage is None
    again.close()
    assert len(list(tmp_path.glob("journal.bin.damaged-*"))) == 1


@pytest.mark.parametrize("cut", [3, 20, -7])
def test_torn_last_entry_is_cut_without_a_copy(tmp_path, cut) -> None:
    path = tmp_path / "journal.bin"
    offsets = _journal_of(path, ["a", "b", "c"])
    data = path.read_bytes()
    path.write_bytes(data[: offsets[2] + cut] if cut > 0 else data[:cut])  # crash while appending c
    j = Journal(path)
    assert [e.game_id for e in j.entries] == ["a", "b"] and j.damage is None
    j.close()
    assert path.stat().st_size == offsets[2]
    assert list(tmp_path.glob("journal.bin.damaged-*")) == []


def test_store_keeps_games_after_journal_damage(tmp_path, outcomes) -> None:
    store = Store(tmp_path, RUN, positions_per_shard=10**9)
    store.ingest(outcomes[:4])
    offsets = [e.offset for e in store.journal.entries]
    store.close()
    path = tmp_path / "ingest" / "journal.bin"
    data = bytearray(path.read_bytes())
    data[offsets[2] - 10] ^= 0xFF  # the second game's entry
    path.write_bytes(bytes(data))
    store = Store(tmp_path, RUN, positions_per_shard=10**9)
    rec = store.recovery
    assert "damaged" in rec.journal_damage and rec.missing_games == [outcomes[1].game_id]
    assert rec.pending_games == 3
    store.flush_all()
    store.close()
    check_shards(tmp_path, [outcomes[0], *outcomes[2:4]])


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
    assert shard_ids(tmp_path) == Counter(o.game_id for o in outcomes)  # shards are all there


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


def test_journal_payload_round_trips_every_row_array_bit_for_bit(outcomes) -> None:
    o = outcomes[0]
    rows = o.row_arrays()
    back = journal_mod.decode_payload(journal_mod.encode_payload(rows))
    assert list(back) == list(rows)
    for k, a in rows.items():
        assert back[k].dtype == a.dtype and back[k].shape == a.shape, k
        np.testing.assert_array_equal(back[k], a)


def test_journal_payload_compressed_round_trips_and_is_smaller(outcomes) -> None:
    o = outcomes[0]
    rows = o.row_arrays()
    raw = journal_mod.encode_payload(rows)
    packed = journal_mod.compress_payload(raw)
    assert packed[:4] == b"KGZ1" and len(packed) < len(raw) // 2
    assert o.payload[:4] == b"KGZ1"  # what the validation pool hands the journal
    back = journal_mod.decode_payload(packed)
    assert list(back) == list(rows)
    for k, a in rows.items():
        assert back[k].dtype == a.dtype and back[k].shape == a.shape, k
        np.testing.assert_array_equal(back[k], a)
    # Cut short or damaged: a ValueError (the cut logs it), never a crash or garbage rows.
    for bad in (packed[:-5], packed[:4] + b"\0" * 20, packed[:12] + bytes(len(packed) - 12)):
        with pytest.raises(ValueError):
            journal_mod.decode_payload(bad)


@pytest.mark.parametrize("cut", [1, 9, -1])
def test_journal_payload_cut_short_is_refused(outcomes, cut) -> None:
    payload = journal_mod.encode_payload(outcomes[0].row_arrays())
    with pytest.raises(ValueError):
        journal_mod.decode_payload(payload[:cut])
    with pytest.raises(ValueError, match="after the last array"):
        journal_mod.decode_payload(payload + b"\0")


def _npz_payload(rows: dict[str, np.ndarray]) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **rows)
    return buf.getvalue()


@pytest.mark.parametrize(
    "older", [_npz_payload, journal_mod.encode_payload], ids=["npz", "uncompressed"]
)
def test_journal_of_an_older_version_is_still_sharded(tmp_path, outcomes, older) -> None:
    # Journals written before the raw payload format hold an .npz per game, and before
    # compression a KGP1 payload: a coordinator upgraded with games pending must still cut
    # them into shards, rows unchanged.
    path = tmp_path / "ingest" / "journal.bin"
    j = Journal(path)
    for o in outcomes[:3]:
        m = dict(meta(o.game_id), positions=o.positions, board_size=o.board_size)
        j.append([(m, older(o.row_arrays()))])
    j.close()
    store = Store(tmp_path, RUN, positions_per_shard=10**9)
    assert store.recovery.pending_games == 3
    store.flush_all()
    store.close()
    check_shards(tmp_path, outcomes[:3])


def test_journal_payload_stores_mostly_zero_tables_sparse_and_exact() -> None:
    rng = np.random.default_rng(5)
    policy = np.zeros((40, 362), np.float32)
    for r in range(40):
        policy[r, rng.choice(362, 6, replace=False)] = rng.random(6, dtype=np.float32)
    rows = {
        "policy": policy,
        "empty": np.zeros((8, 362), np.float32),  # no non-zero element at all
        "dense": rng.random((8, 362), dtype=np.float32),
        "value": np.ones(40, np.float32),
    }
    payload = journal_mod.encode_payload(rows)
    assert len(payload) < policy.nbytes // 4 + rows["dense"].nbytes + 2000  # sparse paid
    back = journal_mod.decode_payload(payload)
    for k, a in rows.items():
        assert back[k].dtype == a.dtype and back[k].shape == a.shape, k
        np.testing.assert_array_equal(back[k], a, err_msg=k)
    # A sparse index beyond the array is refused, not written out of bounds.
    head = journal_mod._PAYLOAD_HEAD
    _, table_len = head.unpack_from(payload, 0)
    first_index_at = head.size + table_len
    bad = bytearray(payload)
    bad[first_index_at : first_index_at + 4] = (10**6).to_bytes(4, "little")
    with pytest.raises(ValueError, match="index out of range"):
        journal_mod.decode_payload(bytes(bad))


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
    assert shard_ids(tmp_path) == Counter(o.game_id for o in outcomes[:3])
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
