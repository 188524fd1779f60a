"""``kgrpc-coordinator migrate``: move a stopped run from SQLite and its data directory into
a PostgreSQL index and a blob store (a directory or s3://BUCKET/PREFIX).

::

    kgrpc-coordinator migrate --from DATA_DIR --index postgresql://... --store s3://BUCKET/RUN

What it does, in this order (docs/operations.md, "Moving a run to PostgreSQL and S3"):

1. Refuses (exit 2, one line saying why) when the coordinator of DATA_DIR still listens (the
   address in ``DATA_DIR/coordinator.port`` takes a connection), when DATA_DIR holds no
   SQLite index, when any table of the target index holds a row, or when the store already
   holds an object under its prefix: nothing is ever overwritten.
2. Cuts the games still waiting in the ingest journal into shards (:meth:`Store.flush_all`,
   as the coordinator does after ``flush_interval_s``; a clean stop cuts only full shards),
   so the target starts with an empty journal and any data directory will do for it.
3. Copies every object of DATA_DIR's layout (``training_data/``: the shards and the rolling
   window, ``models/``) under the same key, create-only, then reads each back and compares
   its sha256 with the index's (``shards``, ``model_files``) where the index has one and with
   the source file's otherwise. The kept games' SGF files go into pack objects instead
   (kgrpc.coordinator.sgf_packs, what a coordinator on a store other than DATA_DIR reads),
   each checked the same way, and their ``sgf_games`` rows are pointed into them. Objects go
   first: the index never names a missing one.
4. Copies every table's rows in one PostgreSQL transaction (COPY; ids kept, and SQLite's
   implicit ``rowid`` into the ``rowid`` column PostgreSQL's schema gives ``games``,
   ``models`` and ``tasks``), compares each table's count with the source's, moves every
   identity sequence past the copied ids (``setval``), and commits. Any mismatch rolls the
   index back (exit 1).

Progress goes to stdout, one line per table and every few objects. The source is left as it
was (except for the cut of step 2), so the old coordinator can be started again on it.
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kgrpc.blobstore import BlobStore, BlobStoreError, LocalBlobStore, open_checked
from kgrpc.coordinator import db, pg
from kgrpc.coordinator.blobs import MODELS_DIR, SGF_DIR, TRAINING_DIR, model_key, shard_key
from kgrpc.digest import file_digest

PORT_FILE = "coordinator.port"  # kgrpc.coordinator.server.PORT_FILE
# Copied object by object; the kept games' SGF files are packed instead (pack_sgf).
PREFIXES = (f"{TRAINING_DIR}/", f"{MODELS_DIR}/")
PACK_BYTES = 64 << 20  # SGF bytes per pack object
Packs = dict[str, tuple[str, int, int]]  # game id -> (pack key, offset, length)
PROGRESS_EVERY_S = 2.0


class MigrateRefused(Exception):
    """The migration must not start (exit 2): the message says why."""


class MigrateFailed(Exception):
    """A copy did not verify (exit 1): the message says which."""


Report = Callable[[str], None]


def add_parser(sub: Any) -> None:
    from kgrpc.cli_help import env_flag

    p = sub.add_parser(
        "migrate",
        help="copy a stopped SQLite/local run into a PostgreSQL index and a blob store",
        description="Copy a stopped run (SQLite index and files in DATA_DIR) into an empty "
        "PostgreSQL index and an empty blob store, verifying counts and sha256 of every "
        "object. S3 endpoint and keys come from the AWS_* variables.",
    )
    env_flag(
        p,
        "--from",
        dest="source",
        metavar="DATA_DIR",
        required=True,
        help="the stopped coordinator's data dir",
    )
    env_flag(p, "--index", required=True, help="the target index: postgresql://USER@HOST/DB")
    env_flag(
        p, "--store", required=True, help="the target store: a directory or s3://BUCKET/PREFIX"
    )


def run(args: argparse.Namespace) -> int:
    try:
        migrate(args.source, args.index, args.store, report=lambda line: print(line, flush=True))
    except MigrateRefused as exc:
        print(f"kgrpc-coordinator migrate: {exc}", file=sys.stderr)
        return 2
    except MigrateFailed as exc:
        print(f"kgrpc-coordinator migrate: {exc}", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------ checks
def coordinator_listening(data_dir: Path) -> str:
    """The address in DATA_DIR/coordinator.port when something accepts a connection there."""
    try:
        text = (data_dir / PORT_FILE).read_text().strip()
        host, port = text.rsplit(":", 1)
        host = {"0.0.0.0": "127.0.0.1", "[::]": "::1", "": "127.0.0.1"}.get(host, host)
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return text
    except (OSError, ValueError):
        return ""


def _source_tables(conn: sqlite3.Connection) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
    ]


def _check_target_empty(pgc: Any, tables: list[str]) -> None:
    held = []
    for t in tables:
        n = pgc.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        if n:
            held.append(f"{t} ({n})")
    if held:
        raise MigrateRefused(
            f"the target index is not empty: {', '.join(held)} — migrate only into a new, "
            "empty database"
        )


def _check_store_empty(store: BlobStore) -> None:
    first = next(iter(store.list("")), None)
    if first is not None:
        raise MigrateRefused(
            f"the target store {store.url} already holds objects (for example {first.key!r}) "
            "— migrate only into an empty bucket prefix or directory"
        )


def flush_pending(data_dir: Path, report: Report) -> int:
    """Cut the journal's pending games into shards; how many games were pending."""
    conn = sqlite3.connect(data_dir / db.DB_NAME)
    try:
        runs = [
            r[0] for r in conn.execute("SELECT DISTINCT run FROM games WHERE shard_index IS NULL")
        ]
        pending = conn.execute("SELECT COUNT(*) FROM games WHERE shard_index IS NULL").fetchone()
    finally:
        conn.close()
    journal = data_dir / "ingest" / "journal.bin"
    if not runs and not (journal.exists() and journal.stat().st_size):
        return 0
    if len(runs) > 1:
        raise MigrateRefused(
            f"games of several runs ({', '.join(runs)}) wait in the ingest journal: start the "
            "coordinator until they are cut (flush_interval_s), stop it, and migrate again"
        )
    from kgrpc.coordinator.store import Store

    run = runs[0] if runs else "run_001"
    store = Store(data_dir, run)
    try:
        cut = store.flush_all()
    finally:
        store.close()
    report(f"cut {pending[0]} pending games of {run} into {len(cut)} shards")
    return int(pending[0])


# ------------------------------------------------------------------------------ objects
def object_digest(store: BlobStore, key: str) -> tuple[int, str]:
    """(size, sha256) of the object as the store gives it back."""
    h = hashlib.sha256()
    size = 0
    for _, data in store.iter_range(key, 0, 4 << 20):
        h.update(data)
        size += len(data)
    return size, h.hexdigest()


def indexed_digests(conn: sqlite3.Connection) -> dict[str, tuple[int, str]]:
    """Key -> (size, sha256) of every object the index records one for."""
    from kgrpc.precision import variant_file_name

    out = {
        shard_key(r[0], r[1]): (int(r[2]), str(r[3]))
        for r in conn.execute("SELECT run, file_name, size_bytes, sha256 FROM shards")
    }
    for r in conn.execute("SELECT model, precision, size_bytes, sha256 FROM model_files"):
        out[model_key(variant_file_name(r[0], r[1]))] = (int(r[2]), str(r[3]))
    return out


def copy_objects(
    data_dir: Path, target: BlobStore, indexed: dict[str, tuple[int, str]], report: Report
) -> tuple[int, int]:
    """Copy and verify every object; (objects, bytes)."""
    source = LocalBlobStore(data_dir)
    keys = [o.key for prefix in PREFIXES for o in source.list(prefix)]
    missing = sorted(k for k in indexed if source.stat(k) is None)
    if missing:
        raise MigrateFailed(
            f"the index names {len(missing)} objects DATA_DIR lacks (for example {missing[0]}): "
            "nothing was copied"
        )
    report(f"copying {len(keys)} objects to {target.url}")
    done = total = 0
    last = time.monotonic()
    for key in keys:
        path = data_dir / key
        want = indexed.get(key)
        if want is None:
            want = tuple(file_digest(path))  # type: ignore[assignment]
        else:
            have = tuple(file_digest(path))
            if have != want:
                raise MigrateFailed(
                    f"{key}: the source file ({have[0]} bytes, sha256 {have[1][:16]}) does not "
                    f"match the index ({want[0]} bytes, sha256 {want[1][:16]})"
                )
        assert want is not None
        target.put_file(key, path, create_only=True)
        got = object_digest(target, key)
        if got != want:
            raise MigrateFailed(
                f"{key}: the store gave back {got[0]} bytes with sha256 {got[1][:16]}, "
                f"expected {want[0]} bytes with sha256 {want[1][:16]}"
            )
        done += 1
        total += got[0]
        if time.monotonic() - last >= PROGRESS_EVERY_S:
            report(f"  {done}/{len(keys)} objects, {total / 1e6:.1f} MB")
            last = time.monotonic()
    report(f"copied {done} objects ({total / 1e6:.1f} MB), every sha256 verified")
    return done, total


# ------------------------------------------------------------------------------ the index
def pack_sgf(data_dir: Path, src: sqlite3.Connection, target: BlobStore, report: Report) -> Packs:
    """Put the kept games' SGF files into pack objects (kgrpc.coordinator.sgf_packs: what a
    coordinator on a store other than DATA_DIR reads), each read back and its sha256 checked
    against the files it was built from; where each game went."""
    from kgrpc.coordinator import sgf_packs

    rows = src.execute("SELECT game_id, path, pack FROM sgf_games ORDER BY seq").fetchall()
    if any(r[2] for r in rows):
        raise MigrateRefused(
            "the source's kept games are already packed in another store: migrate moves a run "
            "kept in DATA_DIR (the default store) only"
        )
    out: Packs = {}
    batch: list[tuple[str, bytes]] = []

    def put() -> None:
        key = sgf_packs.pack_key()
        body = b"".join(data for _, data in batch)
        target.put_bytes(key, body, create_only=True)
        want = (len(body), hashlib.sha256(body).hexdigest())
        got = object_digest(target, key)
        if got != want:
            raise MigrateFailed(
                f"{key}: the store gave back {got[0]} bytes with sha256 {got[1][:16]}, "
                f"expected {want[0]} bytes with sha256 {want[1][:16]}"
            )
        offset = 0
        for game_id, data in batch:
            out[game_id] = (key, offset, len(data))
            offset += len(data)
        batch.clear()

    size = packs = 0
    for game_id, rel, _ in rows:
        try:
            data = (data_dir / SGF_DIR / rel).read_bytes()
        except FileNotFoundError:
            raise MigrateFailed(
                f"{SGF_DIR}/{rel}: the index keeps game {game_id} as SGF, DATA_DIR lacks its file"
            ) from None
        batch.append((game_id, data))
        size += len(data)
        if sum(len(d) for _, d in batch) >= PACK_BYTES:
            put()
            packs += 1
    if batch:
        put()
        packs += 1
    report(f"packed {len(out)} kept games' SGF ({size / 1e6:.1f} MB) into {packs} objects")
    return out


def copy_tables(
    src: sqlite3.Connection, url: str, tables: list[str], packs: Packs, report: Report
) -> int:
    """Every row of ``tables`` into PostgreSQL in one transaction (``sgf_games`` pointing
    into ``packs``); the rows copied."""
    import psycopg

    copied = 0
    with psycopg.connect(url, connect_timeout=pg.CONNECT_TIMEOUT_S) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (pg.WRITE_LOCK,))
        for table in tables:
            cols = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
            if table in pg.ROWID_TABLES:
                cols = ["rowid", *cols]
            names = ", ".join(cols)
            n = 0
            with conn.cursor().copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                pack_cols = ("game_id", "pack", "pack_offset", "pack_length")
                at = [cols.index(c) for c in pack_cols] if table == "sgf_games" else []
                for row in src.execute(f"SELECT {names} FROM {table}"):
                    if table == "sgf_games":
                        row = list(row)
                        row[at[1]], row[at[2]], row[at[3]] = packs[row[at[0]]]
                    copy.write_row(row)
                    n += 1
            there = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            here = src.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            if not n == there == here:
                raise MigrateFailed(
                    f"table {table}: {here} rows in the source, {there} in the target after "
                    "the copy: nothing was committed"
                )
            report(f"table {table}: {there} rows")
            copied += there
        # Identity columns (AUTOINCREMENT ids, the rowid columns) go on past the copied ids,
        # and past every id SQLite ever handed out (an AUTOINCREMENT id is never reused, even
        # after its row is gone: another table may still name it).
        used = dict(src.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
        for table, column in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND is_identity = 'YES'"
        ).fetchall():
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence(%s, %s), "
                f"GREATEST(COALESCE((SELECT MAX({column}) FROM {table}), 0), %s) + 1, false)",
                (table, column, int(used.get(table, 0)) if column != "rowid" else 0),
            )
    return copied


def migrate(
    source: str | Path,
    index: str,
    store_url: str,
    *,
    options: Any = None,
    report: Report = lambda line: None,
) -> dict[str, int]:
    """The whole migration (see the module doc); figures for the caller."""
    data_dir = Path(source)
    if not (data_dir / db.DB_NAME).is_file():
        raise MigrateRefused(f"{data_dir} holds no SQLite index ({db.DB_NAME}): nothing to move")
    if not pg.is_url(index):
        raise MigrateRefused(f"--index {index!r}: expected a postgresql:// URL")
    if not store_url.strip():
        raise MigrateRefused("--store is empty: give a directory or s3://BUCKET/PREFIX")
    listening = coordinator_listening(data_dir)
    if listening:
        raise MigrateRefused(
            f"a coordinator still listens on {listening} ({data_dir / PORT_FILE}): stop it "
            "first (a clean stop), then migrate"
        )
    try:
        target = open_checked(store_url, options=options)
    except BlobStoreError as exc:
        raise MigrateRefused(str(exc)) from None
    if isinstance(target, LocalBlobStore) and target.root.resolve() == data_dir.resolve():
        raise MigrateRefused("--store is DATA_DIR itself: give another directory")
    try:
        pgc = db.connect("", index=index)  # creates the schema in an empty database
    except (sqlite3.Error, ValueError) as exc:
        raise MigrateRefused(str(exc)) from None
    try:
        src = db.connect(data_dir)  # the schema of this version (tables and columns added)
        tables = _source_tables(src)
        src.close()
        _check_target_empty(pgc, tables)
    finally:
        pgc.close()
    _check_store_empty(target)
    report(f"migrating {data_dir} to {pg.redact(index)} and {target.url}")
    pending = flush_pending(data_dir, report)
    src = sqlite3.connect(f"file:{data_dir / db.DB_NAME}?mode=ro", uri=True)
    try:
        objects, size = copy_objects(data_dir, target, indexed_digests(src), report)
        packs = pack_sgf(data_dir, src, target, report)
        try:
            rows = copy_tables(src, index, tables, packs, report)
        except sqlite3.Error as exc:
            raise MigrateFailed(f"reading the source index: {exc}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg"):
                raise MigrateFailed(f"writing the target index: {exc}") from exc
            raise
    finally:
        src.close()
        target.close()
    report(
        f"done: {rows} rows in {len(tables)} tables and {objects} objects; start the "
        f"coordinator with --index and --store (any data directory: the journal is empty)"
    )
    return {"rows": rows, "objects": objects, "bytes": size, "pending_cut": pending}
