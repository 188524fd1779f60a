"""The coordinator's SQLite database (``DATA_DIR/coordinator.sqlite3``): schema and connections.

Tables:

* ``tokens(id, hash, role, label, created_ms, revoked_ms)`` — only the sha256 of a token.
* ``workers(worker_id, token_id, username, hostname, version, registered_ms,
  last_heartbeat_ms, stats_json, games_accepted, games_rejected)``
* ``worker_rejects(worker_id, reason, count)`` — rejections per worker and reason.
* ``games(game_id, worker_id, run, board_size, positions, journal_seq, shard_index,
  accepted_ms)`` — every accepted game; ``shard_index`` NULL while it waits in the
  ingest journal.
* ``shards(run, idx, file_name, size_bytes, sha256, games, positions, board_size, komi,
  rules, created_ms)``
* ``counters(name, value)`` — games/positions received, accepted, rejected, duplicate.
* ``models(name, sha256, size_bytes, blocks, channels, training_steps, training_rows,
  feature_version, status, elo, created_ms, released_ms, run)``
* ``model_files(model, precision, sha256, size_bytes, created_ms)`` — every file of a model,
  one per precision (``fp32``: ``models/NAME.onnx``; ``fp16``/``int8``: ``NAME.fp16.onnx``,
  ``NAME.int8.onnx``, kgrpc/precision.py). The fp32 row repeats the ``models`` row's sha256 and
  size; a model published before precisions gets it on the first open (below).
* ``matches(id, candidate, reference, games_target, decision, elo_diff, elo_low, elo_high,
  created_ms, decided_ms)`` and ``match_games(match_id, game_id, candidate_color, winner,
  score, moves)``.
* ``match_tasks(task_id, match_id, worker_id, games, recorded, issued_ms)`` — every match
  chunk handed out: results count only from the worker it was issued to, up to ``games``.
* ``match_game_tokens(match_id, game_id, task_id, worker_id, token_id, reported_ms)`` — the
  token that reported each match game (NULL without auth); ``match_outliers(match_id,
  token_id, wins, losses, draws, others_wins, others_games, p_value)`` — tokens set aside on a
  match; ``token_quarantine(token_id, since_ms, created_ms)`` — tokens whose games since
  ``since_ms`` are left out (:mod:`kgrpc.coordinator.quorum`). A game recorded before these
  tables existed has no token row and counts under "no token".
* ``tasks(task_id, worker_id, kind, board_size, rules, komi_low, komi_high, komi_step,
  max_moves, model, reference, issued_ms)`` — every task GetTask handed out (self-play and
  match chunks), with the terms its games must fit, kept ``task_retention_s``
  (:mod:`kgrpc.coordinator.tasks`); ``max_moves`` is the game's move cap, ``reference`` ""
  for self-play.
* ``sgf_games(seq, game_id, kind, model, black, white, board_size, komi, moves, result,
  worker_id, finished_ms, stored_ms, path, pack, pack_offset, pack_length)`` — the games kept
  as SGF under ``DATA_DIR/sgf/`` (``path`` relative to it), or, with a remote blob store, at
  ``pack_offset`` (``pack_length`` bytes) of the object ``pack``; see
  :mod:`kgrpc.coordinator.sgf_index` (the table), :mod:`kgrpc.coordinator.archive` (the writer)
  and :mod:`kgrpc.coordinator.sgf_packs`.
* ``ratings(id, model, opponent, games, wins, losses, draws, visits, board_size, komi, rules,
  training_steps, training_rows, selfplay_games, model_created_ms, wall_ms, token_id,
  reported_ms, distinct_games)`` — ladder results against fixed references
  (:mod:`kgrpc.coordinator.ratings`); one row per (model, opponent, games, visits, board_size,
  komi, rules).

Migrations: every table is ``CREATE TABLE IF NOT EXISTS`` and the schema runs on each
writable open, so a database from an older version gains the newer tables (``sgf_games``,
``ratings``, ``tasks``)
the first time it is opened. A column added to an existing table is listed in
:data:`ADDED_COLUMNS` and added with ``ALTER TABLE ... ADD COLUMN`` on a writable open when the
table lacks it (``games.replica``; ``sgf_games.pack``, ``pack_offset``, ``pack_length``, empty
and 0 for rows kept before; ``ratings.distinct_games``, 0 = not counted for ratings reported
before). Data migrations are idempotent
statements of the same script: ``model_files`` gains the fp32 row of every model that lacks one
(an index written before precisions existed).

WAL mode: readers (the auth check) never wait for the ingest writer.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

DB_NAME = "coordinator.sqlite3"
# ``LIMIT ?`` for "no limit" in both engines (SQLite takes -1, PostgreSQL does not).
ALL_ROWS = 2**62


def limit_rows(limit: int) -> int:
    """A ``LIMIT ?`` value: ``limit``, or every row when it is negative."""
    return limit if limit >= 0 else ALL_ROWS


SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL CHECK (role IN ('worker', 'trainer')),
    label TEXT NOT NULL DEFAULT '',
    created_ms INTEGER NOT NULL,
    revoked_ms INTEGER
);
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    token_id INTEGER,
    username TEXT NOT NULL DEFAULT '',
    hostname TEXT NOT NULL DEFAULT '',
    version TEXT NOT NULL DEFAULT '',
    registered_ms INTEGER NOT NULL,
    last_heartbeat_ms INTEGER NOT NULL DEFAULT 0,
    stats_json TEXT NOT NULL DEFAULT '{}',
    games_accepted INTEGER NOT NULL DEFAULT 0,
    games_rejected INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS worker_rejects (
    worker_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (worker_id, reason)
);
CREATE TABLE IF NOT EXISTS games (
    game_id TEXT PRIMARY KEY,
    worker_id TEXT NOT NULL,
    run TEXT NOT NULL,
    board_size INTEGER NOT NULL,
    positions INTEGER NOT NULL,
    journal_seq INTEGER,
    shard_index INTEGER,
    accepted_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS games_pending ON games (shard_index) WHERE shard_index IS NULL;
CREATE TABLE IF NOT EXISTS shard_numbers (
    run TEXT PRIMARY KEY,
    last INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS shards (
    run TEXT NOT NULL,
    idx INTEGER NOT NULL,
    file_name TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    games INTEGER NOT NULL,
    positions INTEGER NOT NULL,
    board_size INTEGER NOT NULL,
    komi REAL NOT NULL,
    rules TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (run, idx)
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS models (
    name TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    blocks INTEGER NOT NULL,
    channels INTEGER NOT NULL,
    training_steps INTEGER NOT NULL,
    training_rows INTEGER NOT NULL,
    feature_version INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('candidate', 'released', 'rejected')),
    elo REAL NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    released_ms INTEGER NOT NULL DEFAULT 0,
    run TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS model_files (
    model TEXT NOT NULL,
    precision TEXT NOT NULL CHECK (precision IN ('fp32', 'fp16', 'int8')),
    sha256 TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (model, precision)
);
INSERT INTO model_files (model, precision, sha256, size_bytes, created_ms)
    SELECT name, 'fp32', sha256, size_bytes, created_ms FROM models WHERE true
    ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS matches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    candidate TEXT NOT NULL,
    reference TEXT NOT NULL,
    games_target INTEGER NOT NULL,
    decision TEXT NOT NULL DEFAULT 'pending',
    elo_diff REAL NOT NULL DEFAULT 0,
    elo_low REAL NOT NULL DEFAULT 0,
    elo_high REAL NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    decided_ms INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS match_tasks (
    task_id TEXT PRIMARY KEY,
    match_id INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    games INTEGER NOT NULL,
    recorded INTEGER NOT NULL DEFAULT 0,
    issued_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY,
    worker_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('selfplay', 'match')),
    board_size INTEGER NOT NULL,
    rules TEXT NOT NULL,
    komi_low REAL NOT NULL,
    komi_high REAL NOT NULL,
    komi_step REAL NOT NULL,
    max_moves INTEGER NOT NULL,
    model TEXT NOT NULL,
    reference TEXT NOT NULL DEFAULT '',
    issued_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_by_worker ON tasks (worker_id, issued_ms);
CREATE INDEX IF NOT EXISTS tasks_by_age ON tasks (issued_ms);
CREATE TABLE IF NOT EXISTS match_games (
    match_id INTEGER NOT NULL,
    game_id TEXT NOT NULL,
    candidate_color INTEGER NOT NULL,
    winner INTEGER NOT NULL,
    score REAL NOT NULL,
    moves INTEGER NOT NULL,
    PRIMARY KEY (match_id, game_id)
);
CREATE TABLE IF NOT EXISTS match_game_tokens (
    match_id INTEGER NOT NULL,
    game_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    token_id INTEGER,
    reported_ms INTEGER NOT NULL,
    PRIMARY KEY (match_id, game_id)
);
CREATE INDEX IF NOT EXISTS match_game_tokens_by_token ON match_game_tokens (token_id);
CREATE TABLE IF NOT EXISTS match_outliers (
    match_id INTEGER NOT NULL,
    token_id INTEGER NOT NULL,
    wins INTEGER NOT NULL,
    losses INTEGER NOT NULL,
    draws INTEGER NOT NULL,
    others_wins INTEGER NOT NULL,
    others_games INTEGER NOT NULL,
    p_value REAL NOT NULL,
    PRIMARY KEY (match_id, token_id)
);
CREATE TABLE IF NOT EXISTS token_quarantine (
    token_id INTEGER PRIMARY KEY,
    since_ms INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sgf_games (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    game_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('selfplay', 'gating')),
    model TEXT NOT NULL,
    black TEXT NOT NULL,
    white TEXT NOT NULL,
    board_size INTEGER NOT NULL,
    komi REAL NOT NULL,
    moves INTEGER NOT NULL,
    result TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    finished_ms INTEGER NOT NULL,
    stored_ms INTEGER NOT NULL,
    path TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sgf_games_model ON sgf_games (model, seq);
CREATE TABLE IF NOT EXISTS ratings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    model TEXT NOT NULL,
    opponent TEXT NOT NULL,
    games INTEGER NOT NULL CHECK (games >= 1 AND games = wins + losses + draws),
    wins INTEGER NOT NULL CHECK (wins >= 0),
    losses INTEGER NOT NULL CHECK (losses >= 0),
    draws INTEGER NOT NULL CHECK (draws >= 0),
    visits INTEGER NOT NULL,
    board_size INTEGER NOT NULL,
    komi REAL NOT NULL,
    rules TEXT NOT NULL,
    training_steps INTEGER NOT NULL,
    training_rows INTEGER NOT NULL,
    selfplay_games INTEGER NOT NULL,
    model_created_ms INTEGER NOT NULL,
    wall_ms INTEGER NOT NULL,
    token_id INTEGER,
    reported_ms INTEGER NOT NULL,
    UNIQUE (model, opponent, games, visits, board_size, komi, rules)
);
"""


def connect(data_dir: str | Path, *, readonly: bool = False, index: str = "") -> sqlite3.Connection:
    """Open (creating if needed) the index; one connection per thread.

    ``index`` "" (the default) is the SQLite file ``DATA_DIR/coordinator.sqlite3``; a
    ``postgresql://`` URL is that PostgreSQL database (:mod:`kgrpc.coordinator.pg`), whose
    connection has the same surface (typed as :class:`sqlite3.Connection` for the callers)."""
    if index:
        return _connect_pg(index, readonly=readonly)
    path = Path(data_dir) / DB_NAME
    if readonly:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, check_same_thread=False, timeout=30
        )
    else:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit is on disk before the ack that depends on it goes out.
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(SCHEMA)
        conn.row_factory = sqlite3.Row
        add_columns(conn)
    conn.row_factory = sqlite3.Row
    return conn


# Columns added after their table was first created: (table, column, definition). Each is
# added on a writable open where it is missing (SQLite has no ADD COLUMN IF NOT EXISTS).
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    # The replica whose journal holds a pending game (kgrpc.coordinator.replica).
    ("games", "replica", "TEXT NOT NULL DEFAULT ''"),
    # Where a kept game's SGF is when a remote blob store packs them
    # (kgrpc.coordinator.sgf_packs); '' = the file DATA_DIR/sgf/<path>, as before.
    ("sgf_games", "pack", "TEXT NOT NULL DEFAULT ''"),
    ("sgf_games", "pack_offset", "INTEGER NOT NULL DEFAULT 0"),
    ("sgf_games", "pack_length", "INTEGER NOT NULL DEFAULT 0"),
    # How many of a rating's games were distinct move sequences (kgrpc.coordinator.ratings);
    # 0 = not counted (reported before the count, or by an older ladder).
    ("ratings", "distinct_games", "INTEGER NOT NULL DEFAULT 0"),
)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    if isinstance(conn, sqlite3.Connection):
        return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    return {
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
    }


def add_columns(conn: sqlite3.Connection) -> None:
    """Add every column of :data:`ADDED_COLUMNS` its table lacks."""
    for table, column, definition in ADDED_COLUMNS:
        if column not in _columns(conn, table):
            with transaction(conn):
                if column not in _columns(conn, table):  # another replica may have just added it
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


def _connect_pg(index: str, *, readonly: bool) -> sqlite3.Connection:
    from kgrpc.coordinator import pg

    if not pg.is_url(index):
        raise ValueError(f"index {index!r}: expected a postgresql:// URL or nothing (SQLite)")
    conn: sqlite3.Connection = pg.PgConnection(index, readonly=readonly)  # type: ignore[assignment]
    if not readonly:
        conn.executescript(SCHEMA)
        add_columns(conn)
    return conn


class transaction:  # noqa: N801 - used as a context manager like a function
    """``with transaction(conn):`` — BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error.

    ``durable=False`` is for writes whose loss in a crash of the machine (not of the
    process) costs nothing: a heartbeat, a registration (the worker registers again on
    NOT_FOUND). Their commit does not wait for the disk (SQLite's WAL with
    ``synchronous=NORMAL``, PostgreSQL's ``synchronous_commit = off``): a fleet's small
    writes would otherwise each wait one fsync on the storage thread (about 6 ms here, a
    ceiling of some 170 a second). Still atomic, still seen at once by every reader, never
    torn; what an acknowledgement promises is written with the default."""

    def __init__(self, conn: sqlite3.Connection, *, durable: bool = True) -> None:
        self.conn = conn
        self.durable = durable
        self._sqlite = isinstance(conn, sqlite3.Connection)

    def __enter__(self) -> sqlite3.Connection:
        if not self.durable and self._sqlite:
            self.conn.execute("PRAGMA synchronous=NORMAL")  # not allowed inside a transaction
        self.conn.execute("BEGIN IMMEDIATE")
        if not self.durable and not self._sqlite:
            self.conn.execute("SET LOCAL synchronous_commit TO off")
        return self.conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self._end(exc_type is not None)
        finally:
            if not self.durable and self._sqlite and not self.conn.in_transaction:
                self.conn.execute("PRAGMA synchronous=FULL")

    def _end(self, failed: bool) -> None:
        if failed:
            self.conn.execute("ROLLBACK")
            return
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error:
            # A failed COMMIT may leave the transaction open (SQLite rolls back on some errors
            # only): every later BEGIN would fail with "within a transaction".
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
