"""The ingest journal: accepted games' training rows, durable before the ack.

File ``DATA_DIR/ingest/journal.bin``, a sequence of entries::

    b"KGJ1" | u32 header_len | u64 payload_len | u32 crc32(header + payload) | header | payload

(little-endian). ``header`` is UTF-8 JSON ``{"seq", "game_id", "worker_id", "board_size",
"komi", "rules", "positions"}``; ``payload`` holds the game's per-row arrays (docs/formats.md
section 4, without ``game_index``) as::

    b"KGP1" | u32 table_len | table | array bytes

``table`` is UTF-8 JSON ``[[name, dtype, shape], ...]`` (dtype as numpy's ``dtype.str``, so
byte order is explicit); the arrays' C-order bytes follow in table order, unpadded. An entry
``[name, dtype, shape, k]`` is an array stored sparse: ``k`` flat indices (``<u4``), then the
``k`` values they hold; every other element is zero (policy targets, mostly zeros, take
about a fifth of their dense size this way). Reading a game back is one JSON parse and a view
per dense array. The validation pool stores that compressed::

    b"KGZ1" | zstd frame (level 1, content size recorded) of a b"KGP1" payload

(:func:`compress_payload`): packed planes, ownership and sparse targets shrink several times
over (``kgrpc-bench ingest`` prints both sizes of its games), so the journal's append and
fsync before each acknowledgement, the rows' trip back from the pool and the cut's reads all
move fewer bytes.
Journals written before this format hold an ``.npz`` per game (it starts with a zip's
``PK``), or uncompressed ``KGP1`` payloads; both are still read.

Entries are appended and fsynced before the game is acknowledged. A torn last entry
(a crash during the append: a partial header, or an entry running past the end of the
file) is cut off when the journal is opened; such a game was never acknowledged. Any
other damage (a CRC or header failure with more data after it) is not silently cut: the
file is kept as ``journal.bin.damaged-<unix ms>``, an ERROR says how many bytes (about how
many entries) were dropped, and the journal is rewritten with every intact entry, those
after the damage included (found again by their magic, lengths and CRC). After a shard is written
the
journal is rewritten without the shard's games (temp file, fsync, rename).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import json
import logging
import math
import os
import struct
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zstandard

from kgrpc.durable import fsync_dir

log = logging.getLogger(__name__)

MAGIC = b"KGJ1"
_HEAD = struct.Struct("<4sIQI")
PAYLOAD_MAGIC = b"KGP1"
COMPRESSED_MAGIC = b"KGZ1"
_PAYLOAD_HEAD = struct.Struct("<4sI")
# zstd level 1: several times smaller for a fraction of a millisecond per 19x19 game; higher
# levels cost more time in the pool for little more.
COMPRESSION_LEVEL = 1
# The largest payload a compressed one may expand to (a 19x19 game of a few thousand moves is
# a few MB): a damaged frame cannot make a cut allocate without bound.
MAX_PAYLOAD_BYTES = 256 << 20


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


def _sparse_pays(a: np.ndarray, nonzero: int) -> bool:
    """Whether ``a`` takes fewer bytes as (u32 index, value) pairs than dense."""
    return nonzero * (4 + a.dtype.itemsize) < a.nbytes // 2


def encode_payload(rows: Mapping[str, np.ndarray]) -> bytes:
    """A game's rows as an entry's payload (the validation pool encodes it, off the
    coordinator's event loop and storage thread). An array that is mostly zeros (a policy
    target: the moves the search visited, of every point) is stored sparse."""
    table: list[list[object]] = []
    chunks: list[memoryview] = []
    for k, v in rows.items():
        a = np.ascontiguousarray(v)
        if a.dtype.hasobject:
            raise ValueError(f"journal payload: array {k!r} holds Python objects")
        flat = a.reshape(-1)
        # Only large float tables are worth the scan: policy targets are (other arrays are
        # dense, or too small to matter).
        nz = np.flatnonzero(flat) if a.dtype.kind == "f" and flat.size >= 1024 else None
        if nz is not None and _sparse_pays(a, len(nz)):
            table.append([k, a.dtype.str, list(a.shape), len(nz)])
            chunks += [
                memoryview(nz.astype("<u4")).cast("B"),
                memoryview(np.ascontiguousarray(flat[nz])).cast("B"),
            ]
        else:
            table.append([k, a.dtype.str, list(a.shape)])
            # A byte view: join copies each array once, straight into the payload.
            chunks.append(memoryview(flat).cast("B"))
    head = json.dumps(table, separators=(",", ":")).encode()
    return b"".join([_PAYLOAD_HEAD.pack(PAYLOAD_MAGIC, len(head)), head, *chunks])


def compress_payload(payload: bytes) -> bytes:
    """A ``KGP1`` payload (:func:`encode_payload`) as a ``KGZ1`` one."""
    frame = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_content_size=True).compress(
        payload
    )
    return COMPRESSED_MAGIC + frame


def decode_payload(payload: bytes | memoryview) -> dict[str, np.ndarray]:
    """The arrays of a payload (``KGZ1``, ``KGP1`` or an older ``.npz``; dense arrays as
    read-only views of the raw bytes)."""
    if bytes(payload[:4]) == COMPRESSED_MAGIC:
        try:
            payload = zstandard.ZstdDecompressor().decompress(
                bytes(payload[4:]), max_output_size=MAX_PAYLOAD_BYTES
            )
        except zstandard.ZstdError as exc:
            raise ValueError(f"journal payload: its zstd frame does not decompress: {exc}") from exc
    if bytes(payload[:2]) == b"PK":  # an .npz payload of an older journal
        with np.load(io.BytesIO(bytes(payload)), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    if len(payload) < _PAYLOAD_HEAD.size:
        raise ValueError(f"journal payload: {len(payload)} bytes, shorter than its header")
    magic, table_len = _PAYLOAD_HEAD.unpack_from(payload, 0)
    if magic != PAYLOAD_MAGIC:
        raise ValueError(f"journal payload: unknown format {magic!r}")
    pos = _PAYLOAD_HEAD.size + table_len
    # A cut-short table fails to parse as JSON (a ValueError too).
    out: dict[str, np.ndarray] = {}
    for name, dtype_str, shape, *sparse in json.loads(bytes(payload[_PAYLOAD_HEAD.size : pos])):
        dtype = np.dtype(dtype_str)
        count = math.prod(shape)
        if sparse:
            (nonzero,) = sparse
            end = pos + nonzero * (4 + dtype.itemsize)
            if end > len(payload):
                raise ValueError(f"journal payload: array {name!r} runs past the payload's end")
            index = np.frombuffer(payload, dtype="<u4", count=nonzero, offset=pos)
            values = np.frombuffer(payload, dtype=dtype, count=nonzero, offset=pos + 4 * nonzero)
            if nonzero and int(index.max()) >= count:
                raise ValueError(f"journal payload: array {name!r} has an index out of range")
            dense = np.zeros(count, dtype=dtype)
            dense[index] = values
            out[name] = dense.reshape(shape)
        else:
            end = pos + count * dtype.itemsize
            if end > len(payload):
                raise ValueError(f"journal payload: array {name!r} runs past the payload's end")
            out[name] = np.frombuffer(payload, dtype=dtype, count=count, offset=pos).reshape(shape)
        pos = end
    if pos != len(payload):
        raise ValueError(f"journal payload: {len(payload) - pos} bytes after the last array")
    return out


def encode_entry(meta: Mapping[str, object], rows: Mapping[str, np.ndarray] | bytes) -> bytes:
    """One entry; ``rows`` as arrays, or already encoded (:func:`encode_payload`)."""
    header = json.dumps(dict(meta), separators=(",", ":")).encode()
    payload = rows if isinstance(rows, bytes) else encode_payload(rows)
    crc = zlib.crc32(payload, zlib.crc32(header))
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


def _parse_at(data: bytes, pos: int) -> JournalEntry | None:
    """The intact entry starting at ``pos``, or None (short, bad magic, bad CRC, bad header)."""
    if pos + _HEAD.size > len(data):
        return None
    magic, hlen, plen, crc = _HEAD.unpack_from(data, pos)
    end = pos + _HEAD.size + hlen + plen
    if magic != MAGIC or end > len(data):
        return None
    body = data[pos + _HEAD.size : end]
    if zlib.crc32(body) != crc:
        return None
    try:
        return _entry_from(json.loads(body[:hlen]), pos, end - pos)
    except (ValueError, KeyError, TypeError):
        return None


def scan(data: bytes) -> tuple[list[JournalEntry], int]:
    """Entries of a journal image and the length of its valid prefix."""
    entries: list[JournalEntry] = []
    pos = 0
    while (e := _parse_at(data, pos)) is not None:
        entries.append(e)
        pos += e.length
    return entries, pos


def _next_intact(data: bytes, start: int) -> int | None:
    """Offset of the next intact entry at or after ``start``."""
    i = data.find(MAGIC, start)
    while i != -1:
        if _parse_at(data, i) is not None:
            return i
        i = data.find(MAGIC, i + 1)
    return None


def _torn_tail(data: bytes, pos: int) -> bool:
    """Whether the bytes from ``pos`` to the end are one entry cut short by a crash during its
    append: a partial prefix, or a header whose entry runs past the end of the file."""
    rest = data[pos:]
    if len(rest) < _HEAD.size:
        return MAGIC.startswith(rest) if len(rest) < len(MAGIC) else rest.startswith(MAGIC)
    magic, hlen, plen, _ = _HEAD.unpack_from(data, pos)
    return magic == MAGIC and pos + _HEAD.size + hlen + plen > len(data)


@dataclass(frozen=True)
class JournalDamage:
    """What opening a damaged journal dropped, and where the untouched copy is."""

    dropped_bytes: int
    regions: int  # separate damaged stretches
    dropped_entries: int  # entry starts (magic) seen in the dropped bytes, at least one per region
    salvaged_entries: int  # intact entries after the first damage, kept
    first_offset: int
    copy: str

    def __str__(self) -> str:
        return (
            f"{self.dropped_bytes} damaged bytes in {self.regions} place(s) from offset "
            f"{self.first_offset} "
            f"(about {self.dropped_entries} entries) dropped, {self.salvaged_entries} intact "
            f"entries after "
            f"them kept; the damaged journal is kept as {self.copy}"
        )


def scan_salvage(data: bytes) -> tuple[list[JournalEntry], list[tuple[int, int]]]:
    """Every intact entry of a journal image, skipping damaged stretches (returned as
    ``(start, end)`` byte ranges): entries carry their magic, lengths and CRC, so the next
    intact one after a damaged stretch is found by searching for the magic."""
    entries: list[JournalEntry] = []
    bad: list[tuple[int, int]] = []
    pos = 0
    while pos < len(data):
        e = _parse_at(data, pos)
        if e is not None:
            entries.append(e)
            pos += e.length
            continue
        nxt = _next_intact(data, pos + 1)
        end = len(data) if nxt is None else nxt
        bad.append((pos, end))
        pos = end
    return entries, bad


def read_entries(path: Path, spans: Sequence[tuple[int, int]]) -> list[dict[str, np.ndarray]]:
    """The rows of the entries at ``(offset, length)`` of the journal file ``path``, with one
    open of the file (from any process: entries in place are never modified)."""
    out = []
    with open(path, "rb") as f:
        for offset, length in spans:
            f.seek(offset)
            out.append(decode_rows(f.read(length)))
    return out


def decode_rows(entry_bytes: bytes) -> dict[str, np.ndarray]:
    _, hlen, plen, _ = _HEAD.unpack_from(entry_bytes, 0)
    # A view, not a slice: the arrays point into the entry's bytes instead of a second copy.
    return decode_payload(memoryview(entry_bytes)[_HEAD.size + hlen : _HEAD.size + hlen + plen])


def _count_magic(data: bytes, start: int, end: int) -> int:
    n, i = 0, data.find(MAGIC, start, end)
    while i != -1:
        n += 1
        i = data.find(MAGIC, i + 1, end)
    return n


class Journal:
    """Append-only file of pending games. Not thread-safe: one owner thread."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        self.entries, bad = scan_salvage(data)
        self.damage: JournalDamage | None = None
        valid = len(data)
        if len(bad) == 1 and bad[0][1] == len(data) and _torn_tail(data, bad[0][0]):
            valid = bad[0][0]
            log.warning("ingest journal: cutting %d bytes of a torn last entry", len(data) - valid)
            with open(self.path, "r+b") as f:
                f.truncate(valid)
                os.fsync(f.fileno())
        elif bad:
            valid = self._salvage(data, bad)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = valid
        self._broken = False
        self.next_seq = max((e.seq for e in self.entries), default=0) + 1

    def _salvage(self, data: bytes, bad: list[tuple[int, int]]) -> int:
        """Damage other than a torn last entry (a bad CRC, a garbled header in the middle):
        keep the file as it is under ``journal.bin.damaged-<unix ms>``, log an ERROR, and
        rewrite the journal with every intact entry (acknowledged games after the damage are
        not thrown away with it). Returns the new file's size."""
        copy = self.path.with_name(f"{self.path.name}.damaged-{int(time.time() * 1000)}")
        with open(copy, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.path.parent)
        first = bad[0][0]
        self.damage = JournalDamage(
            dropped_bytes=sum(b - a for a, b in bad),
            regions=len(bad),
            dropped_entries=sum(max(1, _count_magic(data, a, b)) for a, b in bad),
            salvaged_entries=sum(1 for e in self.entries if e.offset > first),
            first_offset=first,
            copy=copy.name,
        )
        log.error("ingest journal %s is damaged: %s", self.path, self.damage)
        tmp = self.path.with_name(self.path.name + ".tmp")
        moved: list[JournalEntry] = []
        pos = 0
        with open(tmp, "wb") as f:
            for e in self.entries:
                f.write(data[e.offset : e.offset + e.length])
                moved.append(dataclasses.replace(e, offset=pos))
                pos += e.length
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self.entries = moved
        return pos

    def append(
        self, items: Iterable[tuple[Mapping[str, object], Mapping[str, np.ndarray] | bytes]]
    ) -> list[JournalEntry]:
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
            raise OSError(
                errno.EIO,
                f"ingest journal {self.path} is in an unknown state after a "
                "failed write: restart the coordinator",
            )
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
        return self.read_many([entry])[0]

    def read_many(self, entries: Sequence[JournalEntry]) -> list[dict[str, np.ndarray]]:
        """The rows of several entries, with one open of the file."""
        return read_entries(self.path, [(e.offset, e.length) for e in entries])

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
                    JournalEntry(
                        e.seq,
                        e.game_id,
                        e.worker_id,
                        e.board_size,
                        e.komi,
                        e.rules,
                        e.positions,
                        pos,
                        e.length,
                    )
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
        fsync_dir(self.path.parent)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def __iter__(self) -> Iterator[JournalEntry]:
        return iter(list(self.entries))
