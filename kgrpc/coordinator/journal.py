"""The ingest journal: accepted games' training rows, durable before the ack.

File ``DATA_DIR/ingest/journal.bin``, a sequence of entries::

    b"KGJ1" | u32 header_len | u64 payload_len | u32 crc32(header + payload) | header | payload

(little-endian). ``header`` is UTF-8 JSON ``{"seq", "game_id", "worker_id", "board_size",
"komi", "rules", "positions"}``; ``payload`` is an ``.npz`` (numpy.savez) of the game's
per-row arrays (docs/formats.md section 4, without ``game_index``).

Entries are appended and fsynced before the game is acknowledged. A torn last entry
(a crash during the append) fails its length or CRC check and is cut off when the
journal is opened; such a game was never acknowledged. After a shard is written the
journal is rewritten without the shard's games (temp file, fsync, rename).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

MAGIC = b"KGJ1"
_HEAD = struct.Struct("<4sIQI")


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    game_id: str
    worker_id: str
    board_size: int
    komi: float
    rules: str
    positions: int
    offset: int  # of the entry's first byte in the file
    length: int  # whole entry, prefix included

    @property
    def key(self) -> tuple[int, float, str]:
        return (self.board_size, self.komi, self.rules)


def encode_entry(meta: Mapping[str, object], rows: Mapping[str, np.ndarray]) -> bytes:
    header = json.dumps(dict(meta), separators=(",", ":")).encode()
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in rows.items()})
    payload = buf.getvalue()
    crc = zlib.crc32(header + payload)
    return _HEAD.pack(MAGIC, len(header), len(payload), crc) + header + payload


def _entry_from(meta: dict, offset: int, length: int) -> JournalEntry:
    return JournalEntry(
        seq=int(meta["seq"]),
        game_id=str(meta["game_id"]),
        worker_id=str(meta["worker_id"]),
        board_size=int(meta["board_size"]),
        komi=float(meta["komi"]),
        rules=str(meta["rules"]),
        positions=int(meta["positions"]),
        offset=offset,
        length=length,
    )


def scan(data: bytes) -> tuple[list[JournalEntry], int]:
    """Entries of a journal image and the length of its valid prefix."""
    entries: list[JournalEntry] = []
    pos = 0
    while pos + _HEAD.size <= len(data):
        magic, hlen, plen, crc = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + hlen + plen
        if magic != MAGIC or end > len(data):
            break
        body = data[pos + _HEAD.size : end]
        if zlib.crc32(body) != crc:
            break
        try:
            meta = json.loads(body[:hlen])
            entries.append(_entry_from(meta, pos, end - pos))
        except (ValueError, KeyError):
            break
        pos = end
    return entries, pos


def decode_rows(entry_bytes: bytes) -> dict[str, np.ndarray]:
    _, hlen, plen, _ = _HEAD.unpack_from(entry_bytes, 0)
    payload = entry_bytes[_HEAD.size + hlen : _HEAD.size + hlen + plen]
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """Append-only file of pending games. Not thread-safe: one owner thread."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        self.entries, valid = scan(data)
        if valid != len(data):
            log.warning("ingest journal: cutting %d bytes of a torn last entry", len(data) - valid)
            with open(self.path, "r+b") as f:
                f.truncate(valid)
                os.fsync(f.fileno())
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = valid
        self._broken = False
        self.next_seq = max((e.seq for e in self.entries), default=0) + 1

    def append(self, items: Iterable[tuple[Mapping[str, object], Mapping[str, np.ndarray]]]) -> list[JournalEntry]:
        """Append entries (meta without seq) with one write and one fsync."""
        chunks: list[bytes] = []
        new: list[JournalEntry] = []
        offset = self._size
        for meta, rows in items:
            full = {**meta, "seq": self.next_seq}
            self.next_seq += 1
            blob = encode_entry(full, rows)
            new.append(_entry_from(full, offset, len(blob)))
            offset += len(blob)
            chunks.append(blob)
        if not chunks:
            return []
        if self._broken:
            raise OSError(f"ingest journal {self.path} is in an unknown state after a failed write: restart the coordinator")
        data = b"".join(chunks)
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            os.fsync(self._fd)
        except BaseException:
            # A partial write (disk full, I/O error) must not stay in front of the next
            # entries: they would be appended after garbage and cut off as a "torn last
            # entry" on the next start, acknowledged games included.
            self._cut_back(self._size)
            raise
        self._size = offset
        self.entries.extend(new)
        return new

    def _cut_back(self, size: int) -> bool:
        """Truncate the file to ``size`` bytes (durably); on failure refuse further appends."""
        try:
            os.ftruncate(self._fd, size)
            os.fsync(self._fd)
        except OSError:
            log.exception("ingest journal: could not cut the file back to %d bytes", size)
            self._broken = True
            return False
        return True

    def discard(self, entries: list[JournalEntry]) -> None:
        """Forget entries just appended whose games were not stored after all (the index
        commit failed): cut them off the file, so a retry of those games cannot leave two
        entries of one game behind. ``entries`` must be the journal's last entries."""
        if not entries:
            return
        seqs = {e.seq for e in entries}
        self.entries = [e for e in self.entries if e.seq not in seqs]
        start = min(e.offset for e in entries)
        if start + sum(e.length for e in entries) == self._size and self._cut_back(start):
            self._size = start
        # Otherwise the bytes stay in the file but out of ``entries``: the next rewrite drops
        # them, and a start-up recovery keeps at most one entry per game.

    def read(self, entry: JournalEntry) -> dict[str, np.ndarray]:
        with open(self.path, "rb") as f:
            f.seek(entry.offset)
            return decode_rows(f.read(entry.length))

    def rewrite(self, keep: set[int]) -> None:
        """Replace the file by one holding only the entries whose seq is in ``keep``."""
        kept = [e for e in self.entries if e.seq in keep]
        tmp = self.path.with_name(self.path.name + ".tmp")
        new_entries: list[JournalEntry] = []
        with open(self.path, "rb") as src, open(tmp, "wb") as dst:
            pos = 0
            for e in kept:
                src.seek(e.offset)
                dst.write(src.read(e.length))
                new_entries.append(
                    JournalEntry(e.seq, e.game_id, e.worker_id, e.board_size, e.komi, e.rules, e.positions, pos, e.length)
                )
                pos += e.length
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, self.path)
        # The file now holds ``new_entries`` at their new offsets, whatever fails below.
        self.entries = new_entries
        self._size = pos
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError:
            self._broken = True  # the old descriptor points at the replaced file
            raise
        os.close(self._fd)
        self._fd = fd
        _fsync_dir(self.path.parent)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def __iter__(self) -> Iterator[JournalEntry]:
        return iter(list(self.entries))
