"""The coordinator's ingest journal: an append that fails part-way leaves nothing behind,
damage in the middle is kept aside and reported, a torn last entry is cut, the store keeps its
games past damage, and the payload format (sparse, compressed, older versions) round-trips
bit for bit or is refused. :class:`~kgrpc.coordinator.journal.Journal` and the store
directly, without a server."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest

from kgrpc.coordinator import journal as journal_mod
from kgrpc.coordinator.journal import Journal
from kgrpc.coordinator.store import GameOutcome, Store
from tests.ingest_helpers import RUN, check_shards, validated_games


@pytest.fixture(scope="module")
def outcomes() -> list[GameOutcome]:
    return validated_games(6, seed=31)


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
        # b's record start: the journal's magic, inverted
        data[b : b + 4] = bytes(a ^ 0xFF for a in journal_mod.MAGIC)
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
