"""Games kept as SGF: every gating game sent with its record, and a share of the self-play
games (``sgf_share``, all by default), under ``DATA_DIR/sgf/``::

    sgf/<model>/selfplay/<game id>.sgf     self-play games of <model>
    sgf/<candidate>/gating/<game id>.sgf   games of <candidate>'s gating match

Each file is :func:`kgrpc.sgf.record_to_sgf` of the uploaded record: rules, komi, the model
names as players, the result, and each move's root value and visits (private properties
and a comment). A row of the ``sgf_games`` table indexes each file; files are found through
it, never by joining a name a caller sent. Model names and game ids come from workers: one
is used as a file name only when it is a plain one (letters, digits, ``_ . -``, not starting
with a dot, at most 64 characters), any other becomes ``x-`` and 16 hex digits of its sha256.

A gating game is kept when its worker sends the record with the result (``MatchGame.record``)
and the record replays. With ``match_records_required`` (the default) every gating game must
carry a record that replays, and the result counted is the replay's
(:func:`check_match_records`); without it, a record that does not replay is logged and
counted, not kept, and its result counts as one sent without a record.

Order: a file is written in place (:func:`kgrpc.durable.write_unsynced`: no temporary file
and rename, which cost more than the write) and made durable, with the others of the last
``FLUSH_INTERVAL_S`` seconds (:func:`kgrpc.durable.sync_files`: one ``syncfs`` on Linux),
before its index row is committed, so every row names a whole file; a file a crash cut short
has no row, is never listed or served, and is written again if its game is kept again. A
failure is logged and counted; it never fails an upload (the game's training rows are stored
either way).
With a blob store other than DATA_DIR (S3) no file is written: the games of each flush are
put as one pack object before their rows, which point at (pack, offset, length), and a game
is read back with one ranged read (:mod:`kgrpc.coordinator.sgf_packs`).
Self-play games are chosen by a hash of their id (:func:`selected`), so a game sent again is
chosen again. Building and writing the files runs on the archive's own thread; at most
``max_pending_bytes`` of serialized games wait for it, beyond that the uploader waits (memory
stays bounded, nothing is dropped).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import hashlib
import logging
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgrpc.blobstore import BlobNotFoundError, BlobStore, BlobStoreError, BlobUnavailableError
from kgrpc.coordinator import db, sgf_packs
from kgrpc.coordinator.blobs import in_place, sgf_key, unavailable
from kgrpc.coordinator.errors import invalid, not_found
from kgrpc.coordinator.outcome import GameOutcome
from kgrpc.durable import sync_files, write_unsynced
from kgrpc.go.board import BLACK, WHITE
from kgrpc.records import ReplayResult, TaskTerms
from kgrpc.sgf import record_to_sgf, result_string
from kgrpc.v1 import common_pb2, coordinator_pb2, records_pb2

log = logging.getLogger("kgrpc.coordinator")

SGF_DIR = "sgf"
KINDS = ("selfplay", "gating")
KIND_TO_PROTO = {
    "selfplay": coordinator_pb2.GAME_KIND_SELFPLAY,
    "gating": coordinator_pb2.GAME_KIND_GATING,
}
PROTO_TO_KIND = {v: k for k, v in KIND_TO_PROTO.items()}
SAFE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
MAX_LIST = 1000
MAX_PENDING_BYTES = 64 << 20
FLUSH_INTERVAL_S = 2.0
OnStorage = Callable[..., Awaitable[Any]]
# (serialized game, worker id) pairs and their move counts -> their outcomes, in order.
# (serialized record, worker id, its task's terms) of each game, their move counts.
Validate = Callable[
    [list[tuple[bytes, str, TaskTerms | None]], list[int]], Awaitable[list[GameOutcome]]
]


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


# ---------------------------------------------------------------------- the index
def index(conn: sqlite3.Connection, games: Sequence[KeptGame]) -> int:
    """Add the rows of written files (a game kept before keeps its row); rows added."""
    with db.transaction(conn):
        before = conn.total_changes
        conn.executemany(
            "INSERT INTO sgf_games (game_id, kind, model, black, white, board_size, "
            "komi, moves, result, worker_id, finished_ms, stored_ms, path, pack, pack_offset, "
            "pack_length) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [
                (
                    g.game_id,
                    g.kind,
                    g.model,
                    g.black,
                    g.white,
                    g.board_size,
                    g.komi,
                    g.moves,
                    g.result,
                    g.worker_id,
                    g.finished_ms,
                    g.stored_ms,
                    g.path,
                    g.pack,
                    g.pack_offset,
                    g.pack_length,
                )
                for g in games
            ],
        )
        return conn.total_changes - before


def known(conn: sqlite3.Connection, game_ids: Sequence[str]) -> set[str]:
    ids = list(game_ids)
    found: set[str] = set()
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        q = f"SELECT game_id FROM sgf_games WHERE game_id IN ({','.join('?' * len(part))})"
        found.update(r[0] for r in conn.execute(q, part))
    return found


def _row(r: sqlite3.Row) -> KeptGame:
    return KeptGame(
        game_id=r["game_id"],
        kind=r["kind"],
        model=r["model"],
        black=r["black"],
        white=r["white"],
        board_size=r["board_size"],
        komi=r["komi"],
        moves=r["moves"],
        result=r["result"],
        worker_id=r["worker_id"],
        finished_ms=r["finished_ms"],
        stored_ms=r["stored_ms"],
        path=r["path"],
        seq=r["seq"],
        pack=r["pack"],
        pack_offset=r["pack_offset"],
        pack_length=r["pack_length"],
    )


def list_kept(
    conn: sqlite3.Connection, model: str = "", kind: str = "", limit: int = 50, before_seq: int = 0
) -> list[KeptGame]:
    """Kept games, newest first: of ``model`` and ``kind`` when given, before ``before_seq``
    when positive, at most ``limit`` (1..1000)."""
    if kind and kind not in KINDS:
        raise invalid(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not 1 <= limit <= MAX_LIST:
        raise invalid(f"limit must be 1..{MAX_LIST}, got {limit}")
    if before_seq < 0:
        raise invalid(f"before_seq must be >= 0, got {before_seq}")
    where, args = [], []
    if model:
        where.append("model = ?")
        args.append(model)
    if kind:
        where.append("kind = ?")
        args.append(kind)
    if before_seq:
        where.append("seq < ?")
        args.append(before_seq)
    sql = "SELECT * FROM sgf_games"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = conn.execute(sql + " ORDER BY seq DESC LIMIT ?", (*args, limit)).fetchall()
    return [_row(r) for r in rows]


def _colour_name(value: int) -> str:
    """A Color as its enum name (``COLOR_BLACK``), the way a client's code spells it."""
    return common_pb2.Color.Name(value) if value in common_pb2.Color.values() else str(value)


def find(conn: sqlite3.Connection, game_id: str) -> KeptGame | None:
    r = conn.execute("SELECT * FROM sgf_games WHERE game_id = ?", (game_id,)).fetchone()
    return _row(r) if r is not None else None


def counts_by_kind(conn: sqlite3.Connection) -> dict[str, int]:
    out = dict.fromkeys(KINDS, 0)
    for r in conn.execute("SELECT kind, COUNT(*) FROM sgf_games GROUP BY kind"):
        out[r[0]] = r[1]
    return out


# ---------------------------------------------------------------------- gating records
async def check_match_records(
    req: coordinator_pb2.ReportMatchResultRequest,
    validate: Validate,
    task: TaskTerms | None = None,
    *,
    required: bool = False,
) -> tuple[list[records_pb2.GameRecord], int]:
    """The records sent with a match report that replay (``validate``, against ``task``:
    the stored terms of the report's match task, None when not stored), and how many did
    not. A record that contradicts its game's fields or the match's models, or the terms of
    its task (``task_mismatch``: another board size, rules, komi, task id), is
    INVALID_ARGUMENT.

    ``required`` (the coordinator's ``match_records_required``): every game must carry its
    record and every record must replay as a finished legal game of its task, else the whole
    report is INVALID_ARGUMENT with the game and the reason; each game's ``winner`` and
    ``score`` are then set in ``req`` to what the replay computed (the figures counted). Not
    required: a record that does not replay is logged and not kept, and the report counts as
    one without records. Games whose candidate colour is invalid are left to the report's own
    checks."""
    checked: list[records_pb2.GameRecord] = []
    games: list[coordinator_pb2.MatchGame] = []
    for g in req.games:
        if not g.HasField("record"):
            if required:
                raise invalid(
                    f"game {g.game_id!r} has no record: every gating game must carry its "
                    "record (MatchGame.record), which the coordinator replays and whose result "
                    "it counts; nothing of this report was recorded"
                )
            continue
        if g.candidate_color not in (common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE):
            continue
        r = g.record
        what = f"game {g.game_id!r}: its record"
        if r.game_id != g.game_id:
            raise invalid(f"{what} has game_id {r.game_id!r}")
        if g.candidate_color == common_pb2.COLOR_BLACK:
            want = (req.candidate_model, req.reference_model)
        else:
            want = (req.reference_model, req.candidate_model)
        if (r.black_model, r.white_model) != want:
            raise invalid(
                f"{what} names black {r.black_model!r} and white {r.white_model!r}; "
                f"the match and candidate_color say {want[0]!r} and {want[1]!r}"
            )
        if r.result.winner != g.winner:
            raise invalid(
                f"{what} has winner {_colour_name(r.result.winner)}, the report "
                f"{_colour_name(g.winner)}"
            )
        if len(r.moves) != g.moves:
            raise invalid(f"{what} has {len(r.moves)} moves, the report {g.moves}")
        checked.append(r)
        games.append(g)
    if not checked:
        return [], 0
    outcomes = await validate(
        [(r.SerializeToString(), req.worker_id, task) for r in checked],
        [len(r.moves) for r in checked],
    )
    good = []
    for g, r, o in zip(games, checked, outcomes, strict=True):
        if o.reason == "task_mismatch":
            raise invalid(f"game {r.game_id!r}: its record does not fit its task: {o.detail}")
        if required and not o.ok:
            raise invalid(
                f"game {r.game_id!r}: its record does not replay as a finished legal game of "
                f"task {req.task_id!r} ({o.reason}: {o.detail}); nothing of this report was "
                "recorded"
            )
        if o.ok:
            good.append(r)
            if required:  # the replay's figures are the ones counted
                g.winner = o.winner
                g.score = o.score
        else:
            log.warning(
                "gating game %r of task %s not kept as SGF: its record does not replay (%s: %s)",
                r.game_id,
                req.task_id,
                o.reason,
                o.detail,
            )
    return good, len(checked) - len(good)


# ---------------------------------------------------------------------- the writer
class GameArchive:
    """Writes SGF files on its own thread and indexes them through ``on_storage`` (the
    storage thread, owner of ``conn``).

    Files are renamed into place as soon as they are built, but made durable in groups: at
    most ``flush_interval_s`` later, every file written since is fsynced (together) and only
    then indexed, so a crash loses at most the last moments' SGFs (unindexed files, never a
    row naming a file that is not whole) and the fsyncs do not hold up the ingest journal's."""

    def __init__(
        self,
        data_dir: Path,
        share: float,
        conn: sqlite3.Connection,
        on_storage: OnStorage,
        *,
        max_pending_bytes: int = MAX_PENDING_BYTES,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        blobs: BlobStore | None = None,
    ) -> None:
        self.root = Path(data_dir) / SGF_DIR
        # Another store than DATA_DIR (kgrpc.coordinator.blobs): no files; each flush puts
        # one pack of its games' SGF into the store before their rows (sgf_packs.py).
        self.blobs = blobs
        self.remote = blobs is not None and not in_place(
            blobs, sgf_key("x.sgf"), self.root / "x.sgf"
        )
        self.share = share
        self.conn = conn
        self.flush_interval_s = flush_interval_s
        self._db = on_storage
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-sgf")
        self._budget = max_pending_bytes
        self._pending_bytes = 0
        self._space = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        self._unsynced: list[KeptGame] = []
        self._queued: set[str] = set()  # ids submitted and not yet indexed (or given up)
        self._unsynced_dirs: set[Path] = set()
        self._unpacked: list[bytes] = []  # the SGF of each of _unsynced, with a remote store
        self._flush_lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # This process's figures, for /metrics.
        self.written = dict.fromkeys(KINDS, 0)
        self.failures = 0
        self.refused_records = 0
        self._disk_full = False  # a full disk was reported (once, until a write succeeds)
        self._store_down = ""  # a remote store's failure, while packs wait for it (logged once)
        self._closing = False  # close(): nothing more is kept back for a retry

    async def keep_selfplay(self, accepted: Sequence[tuple[bytes, GameOutcome]]) -> None:
        """Queue the chosen share of newly accepted self-play games (serialized, outcome)."""
        picked = [(data, o) for data, o in accepted if selected(o.game_id, self.share)]
        if picked:
            # Rendered by the validation pool (GameOutcome.kept) unless its share differed.
            ready = [o.kept for _, o in picked if o.kept is not None]
            chosen = [(data, o.worker_id) for data, o in picked if o.kept is None]
            size = sum(len(data) for data, _ in picked)
            await self._submit(
                size,
                [o.game_id for _, o in picked],
                lambda: ready + prepare_selfplay(chosen),
            )

    async def keep_match(
        self,
        req: coordinator_pb2.ReportMatchResultRequest,
        records: Sequence[records_pb2.GameRecord],
    ) -> None:
        """Queue the checked records of a recorded match report (games kept before are not
        written again)."""
        if not records:
            return
        have = await self._db(known, self.conn, [r.game_id for r in records])
        todo = [r for r in records if r.game_id not in have and r.game_id not in self._queued]
        if todo:
            size = sum(r.ByteSize() for r in todo)
            await self._submit(
                size,
                [r.game_id for r in todo],
                lambda: [prepare(r, "gating", req.candidate_model, req.worker_id) for r in todo],
            )

    async def _submit(
        self, size: int, ids: list[str], build: Callable[[], list[tuple[KeptGame, bytes]]]
    ) -> None:
        """Queue ``build`` (``size`` bytes of games) once the budget has room for it (or
        nothing else waits: a batch larger than the budget goes alone)."""
        async with self._space:
            await self._space.wait_for(
                lambda: not self._pending_bytes or self._pending_bytes + size <= self._budget
            )
            self._pending_bytes += size
        self._queued.update(ids)
        task = asyncio.ensure_future(self._keep(size, ids, build))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _keep(
        self, size: int, ids: list[str], build: Callable[[], list[tuple[KeptGame, bytes]]]
    ) -> None:
        try:
            loop = asyncio.get_running_loop()
            games, dirs, texts = await loop.run_in_executor(self._pool, self._write, build)
            self._unsynced.extend(games)
            self._unsynced_dirs |= dirs
            self._unpacked.extend(texts)
            self._disk_full = False
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.ensure_future(self._flush_soon())
        except OSError as exc:
            self.failures += 1
            self._queued.difference_update(ids)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                log.exception("could not write games as SGF")
            elif not self._disk_full:
                # The storage's own health check reports the full disk (one line per
                # incident, kgrpc.coordinator.storage_health): one line here too, no traceback.
                self._disk_full = True
                log.warning("games not kept as SGF while the disk is full: %s", exc)
        except Exception:  # noqa: BLE001 - the games are stored; only their SGF is missing
            self.failures += 1
            self._queued.difference_update(ids)
            log.exception("could not write games as SGF")
        finally:
            async with self._space:
                self._pending_bytes -= size
                self._space.notify_all()

    def _write(
        self, build: Callable[[], list[tuple[KeptGame, bytes]]]
    ) -> tuple[list[KeptGame], set[Path], list[bytes]]:
        items = build()
        if self.remote:  # packed at the next flush (sgf_packs.py): nothing written here
            return [g for g, _ in items], set(), [data for _, data in items]
        dirs = write_unsynced([(self.root / g.path, data) for g, data in items])
        return [g for g, _ in items], dirs, []

    async def _flush_soon(self) -> None:
        """Flush ``flush_interval_s`` from now (or when woken), until nothing is left."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.flush_interval_s)
            self._wake.clear()
            await self.flush()
            if not self._unsynced:
                return

    async def flush(self) -> None:
        """Make the files written so far durable, then index them."""
        async with self._flush_lock:
            games, dirs, texts = self._unsynced, self._unsynced_dirs, self._unpacked
            self._unsynced, self._unsynced_dirs, self._unpacked = [], set(), []
            if not games:
                return
            retry = False
            try:
                loop = asyncio.get_running_loop()
                if self.remote:
                    assert self.blobs is not None
                    games = await loop.run_in_executor(
                        self._pool, sgf_packs.put, self.blobs, games, texts
                    )
                else:
                    await loop.run_in_executor(
                        self._pool, sync_files, [self.root / g.path for g in games], dirs
                    )
                await self._db(index, self.conn, games)
                if self._store_down:
                    log.warning("SGF packs reach the store again (after: %s)", self._store_down)
                    self._store_down = ""
            except BlobUnavailableError as exc:
                retry = self._retry_later(games, texts, exc)
                if not retry:
                    self.failures += 1
                    log.error("could not keep %d games as SGF: %s", len(games), exc)
                return
            except BlobStoreError as exc:  # the store refuses: one line, not a traceback
                self.failures += 1
                log.error("could not keep %d games as SGF: %s", len(games), exc)
                return
            except Exception:  # noqa: BLE001 - the games are stored; only their SGF is missing
                self.failures += 1
                log.exception("could not keep %d games as SGF", len(games))
                return
            finally:
                if not retry:
                    self._queued.difference_update(g.game_id for g in games)
            for g in games:
                self.written[g.kind] += 1

    def _retry_later(
        self, games: list[KeptGame], texts: list[bytes], exc: BlobUnavailableError
    ) -> bool:
        """Keep a pack the store could not take for the next flush, while the SGF waiting in
        memory stays within the archive's budget (``max_pending_bytes``) and the archive is
        not closing: a short outage of the store loses no kept game."""
        waiting = sum(map(len, texts)) + sum(map(len, self._unpacked))
        if self._closing or waiting > self._budget:
            return False
        self._unsynced[:0] = games
        self._unpacked[:0] = texts
        if not self._store_down:
            self._store_down = str(exc)
            log.error(
                "SGF of kept games waits in memory (up to %d MiB) for the store: %s",
                self._budget >> 20,
                exc,
            )
        return True

    def path(self, game: KeptGame) -> Path:
        return self.root / game.path

    async def read_text(self, game: KeptGame) -> str:
        """The SGF of a kept game: one ranged read of its pack, or its file under
        DATA_DIR/sgf/; UNAVAILABLE when the store cannot be reached."""
        if not game.pack:
            try:
                return await asyncio.to_thread(self.path(game).read_text, "utf-8")
            except FileNotFoundError:
                return await self._read_unpacked(game)
        if self.blobs is None:
            raise unavailable(BlobStoreError(f"game {game.game_id} is in a pack: no store"))
        try:
            data = await asyncio.to_thread(sgf_packs.read, self.blobs, game)
        except BlobStoreError as exc:
            raise unavailable(exc) from None
        return data.decode("utf-8")

    async def _read_unpacked(self, game: KeptGame) -> str:
        """A game kept as an object of its own (a run stored one SGF object per game before
        packs), or NOT_FOUND saying it is missing: never a traceback for a lost file."""
        if self.blobs is not None and not self.blobs.is_local:
            try:
                data = await asyncio.to_thread(self.blobs.get_bytes, sgf_key(game.path))
            except BlobNotFoundError:
                pass
            except BlobStoreError as exc:
                raise unavailable(exc) from None
            else:
                return data.decode("utf-8")
        raise not_found(f"the SGF of game {game.game_id} is missing from the archive")

    @property
    def waiting_for_store(self) -> bool:
        """Whether kept games' SGF waits in memory for a store that is down."""
        return bool(self._store_down)

    @property
    def pending_bytes(self) -> int:
        """Serialized games queued or being written."""
        return self._pending_bytes

    async def drain(self) -> None:
        """Wait until every queued game is written, durable and indexed."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._flusher is not None:
            self._wake.set()
            await self._flusher
        await self.flush()

    async def close(self) -> None:
        """Finish every queued batch, then stop the thread."""
        self._closing = True
        await self.drain()
        self._pool.shutdown(wait=True)
