"""Model registry: files under DATA_DIR/models/, release and gating state, curriculum.

A published model is ``DATA_DIR/models/NAME.onnx`` (moved there atomically after its
size, sha256 and contents were checked: :mod:`kgrpc.coordinator.model_check`) plus a
``models`` row. The first model of a run is released at once; later ones are candidates with
a gating match against the current best (``matches`` / ``match_games`` rows), unless
``gating_enabled`` is false.

A model has one file per precision (kgrpc/precision.py), each a ``model_files`` row: its fp32
file (``NAME.onnx``, published first: it creates the model) and, published later, its fp16
and int8 files (``NAME.fp16.onnx``, ``NAME.int8.onnx``). Adding a file changes neither the
model's status nor its gating: release and gating concern the model, whose files are one
network in several number formats. ``ModelInfo.files`` lists them; ``ModelInfo.sha256`` and
``size_bytes`` stay the fp32 file's.

Gating is monotone: a pending match always has the current best as its reference. Every
release (and start-up, for an index written by older versions) supersedes the pending
matches against an older reference: their decision becomes ``superseded`` and each of their
candidates gets a new match, from 0 games, against the new best. Reports for the match tasks
of a superseded match answer FAILED_PRECONDITION with details starting
:data:`SUPERSEDED_REASON` (the worker drops the task), and record nothing. A candidate is
released only when it beat its reference (more wins than losses) and, besides, its Elo
difference exceeds ``gating_elo_threshold``, or it reached a new multiple of
``release_every_steps`` (a milestone lowers the bar to "beat it", never below), or the SPRT
accepted it.

Match games are handed to workers in chunks (``match_chunk_games``), only to workers
registered under the asking token; a chunk not reported within ``match_task_timeout_s`` is
handed out again. Every chunk handed out is a ``match_tasks`` row: results count only when
reported for that task by the worker it was issued to (authenticated by the token that
registered it), at most the chunk's number of games, once per game id. Decision after
``gating_games`` games: release when the Elo
difference exceeds ``gating_elo_threshold`` or when the candidate reached a new
multiple of ``release_every_steps``; with ``gating_sprt`` the SPRT can stop earlier.
A released model's Elo is its reference's Elo plus the measured difference.

All methods block; call them from the storage thread only.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from kgrpc import elo
from kgrpc.coordinator import db, model_check, quorum
from kgrpc.coordinator.config import Config, CurriculumStage
from kgrpc.coordinator.errors import CoordinatorError, denied, invalid, not_found
from kgrpc.durable import fsync_dir
from kgrpc.precision import FP32, PRECISIONS, from_proto, to_proto, variant_file_name
from kgrpc.protocol import MATCH_SUPERSEDED, PRECISION_ABSENT
from kgrpc.schema import FeatureVersionError, check_feature_version
from kgrpc.v1 import common_pb2, coordinator_pb2

log = logging.getLogger("kgrpc.coordinator")
# Matched whole (fullmatch: "$" would let a trailing newline through). The series may not
# start with "." (a hidden file, or one that start-up takes for a temporary ".*.tmp*" file and
# deletes); numbers stay within SQLite's 64-bit integers.
NAME_RE = re.compile(
    r"(?P<series>[A-Za-z0-9_][A-Za-z0-9_.]{0,63})-b(?P<blocks>\d{1,6})c(?P<channels>\d{1,6})[a-z]{0,16}"
    r"-s(?P<steps>\d{1,18})-d(?P<rows>\d{1,18})"
)
SUPERSEDED_REASON = MATCH_SUPERSEDED
STATUS_TO_PROTO = {
    "candidate": common_pb2.MODEL_STATUS_CANDIDATE,
    "released": common_pb2.MODEL_STATUS_RELEASED,
    "rejected": common_pb2.MODEL_STATUS_REJECTED,
}


def now_ms() -> int:
    return int(time.time() * 1000)


def stage_for(steps: int, curriculum: tuple[CurriculumStage, ...]) -> CurriculumStage:
    """The curriculum stage for a released model with ``steps`` training steps."""
    for stage in curriculum:
        if stage.until_steps == 0 or steps < stage.until_steps:
            return stage
    return curriculum[-1]


def gating_decision(
    wins: int,
    losses: int,
    draws: int,
    *,
    games_target: int,
    candidate_steps: int,
    reference_steps: int,
    elo_threshold: float,
    release_every_steps: int,
    use_sprt: bool,
) -> str:
    """ "pending", "released" or "rejected" for a match's results so far. Never "released"
    for a candidate that did not beat its reference (wins > losses)."""
    games = wins + losses + draws
    beat = wins > losses
    milestone = (
        release_every_steps > 0
        and candidate_steps // release_every_steps > reference_steps // release_every_steps
    )
    if use_sprt and games > 0:
        verdict = elo.sprt(wins, losses, draws)
        if verdict == "accept" and beat:
            return "released"
        if verdict == "reject" and not milestone:
            return "rejected"
    if games < games_target:
        return "pending"
    if beat and (milestone or elo.elo_diff(wins, losses, draws) > elo_threshold):
        return "released"
    return "rejected"


def parse_name(name: str) -> dict[str, int | str]:
    m = NAME_RE.fullmatch(name)
    if not m:
        raise invalid(
            f"model name {name!r} does not follow "
            f"{{series}}-b{{blocks}}c{{channels}}-s{{steps}}-d{{rows}}"
        )
    return {
        "series": m.group("series"),
        "blocks": int(m.group("blocks")),
        "channels": int(m.group("channels")),
        "steps": int(m.group("steps")),
        "rows": int(m.group("rows")),
    }


def row_to_info(
    r: sqlite3.Row, files: dict[str, sqlite3.Row] | None = None
) -> common_pb2.ModelInfo:
    """The ModelInfo of a ``models`` row with its ``model_files`` rows by precision (the fp32
    file from the ``models`` row where that row is missing: an index not yet migrated)."""
    listed = [_file(files[p]) if files and p in files else None for p in PRECISIONS]
    if listed[0] is None:
        listed[0] = common_pb2.ModelFile(
            precision=to_proto(FP32), size_bytes=r["size_bytes"], sha256=r["sha256"]
        )
    return common_pb2.ModelInfo(
        name=r["name"],
        sha256=r["sha256"],
        size_bytes=r["size_bytes"],
        blocks=r["blocks"],
        channels=r["channels"],
        training_steps=r["training_steps"],
        training_rows=r["training_rows"],
        feature_version=r["feature_version"],
        status=STATUS_TO_PROTO[r["status"]],
        elo=r["elo"],
        created_unix_ms=r["created_ms"],
        released_unix_ms=r["released_ms"],
        files=[f for f in listed if f is not None],
    )


def _file(r: sqlite3.Row) -> common_pb2.ModelFile:
    return common_pb2.ModelFile(
        precision=to_proto(r["precision"]), size_bytes=r["size_bytes"], sha256=r["sha256"]
    )


@dataclass(frozen=True)
class Committed:
    """What a publish did: the model as it now is, whether it waits for gating, and whether
    WatchModels must announce it (a new release, or a file added to the current release)."""

    model: common_pb2.ModelInfo
    gating_scheduled: bool
    announce: bool


@dataclass
class MatchTaskSpec:
    task_id: str
    candidate: str
    reference: str
    games: int


@dataclass
class ReportOutcome:
    recorded: int
    decision: str
    released: common_pb2.ModelInfo | None = None


@dataclass
class Models:
    conn: sqlite3.Connection
    models_dir: Path
    cfg: Config

    def __post_init__(self) -> None:
        # Publishing checks every model with onnx/onnxruntime (model_check): a coordinator
        # that could not check would store models no worker may be able to load.
        model_check.require_runtime()
        with db.transaction(self.conn):
            stale = self._supersede_stale()
        if stale:
            log.warning(
                "%d pending gating matches had an old reference: matched again against "
                "the current best",
                len(stale),
            )

    # ------------------------------------------------------------------ queries
    def get(self, name: str) -> sqlite3.Row | None:
        return self.conn.execute("SELECT * FROM models WHERE name = ?", (name,)).fetchone()

    def _info(self, row: sqlite3.Row) -> common_pb2.ModelInfo:
        files = {
            f["precision"]: f
            for f in self.conn.execute("SELECT * FROM model_files WHERE model = ?", (row["name"],))
        }
        return row_to_info(row, files)

    def info(self, name: str) -> common_pb2.ModelInfo:
        row = self.get(name)
        if row is None:
            raise not_found(f"unknown model {name!r}")
        return self._info(row)

    def file_path(self, name: str, precision: str = FP32) -> Path:
        return self.models_dir / variant_file_name(name, precision)

    def file(
        self, name: str, precision: str = FP32
    ) -> tuple[common_pb2.ModelInfo, common_pb2.ModelFile, Path]:
        """(info, file, path) of the model's ``precision`` file. NOT_FOUND for an unknown
        model, and (details starting :data:`kgrpc.protocol.PRECISION_ABSENT`) for a model
        without a file in that precision."""
        info = self.info(name)
        for f in info.files:
            if from_proto(f.precision) == precision:
                return info, f, self.file_path(name, precision)
        have = ", ".join(from_proto(f.precision) for f in info.files)
        raise not_found(
            f"{PRECISION_ABSENT}: model {name!r} has no {precision} file (it has {have}); "
            f"ask for {FP32}, which every model has",
            PRECISION_ABSENT,
            {"model": name, "precision": precision, "available": have.replace(" ", "")},
        )

    def path(self, name: str) -> Path:
        """The model's fp32 file."""
        return self.file(name)[2]

    def best(self) -> sqlite3.Row | None:
        return self.conn.execute(
            "SELECT * FROM models WHERE status = 'released' AND run = ? ORDER BY released_ms "
            "DESC, rowid DESC LIMIT 1",
            (self.cfg.run,),
        ).fetchone()

    def best_info(self) -> common_pb2.ModelInfo | None:
        row = self.best()
        return self._info(row) if row is not None else None

    def all(self, offset: int = 0, limit: int = -1) -> list[common_pb2.ModelInfo]:
        """Models, newest first: ``limit`` of them (-1: all) after skipping ``offset``."""
        rows = self.conn.execute(
            "SELECT * FROM models ORDER BY created_ms DESC, rowid DESC LIMIT ? OFFSET ?",
            (db.limit_rows(limit), max(0, offset)),
        ).fetchall()
        files: dict[str, dict[str, sqlite3.Row]] = {}
        names = [r["name"] for r in rows]
        for i in range(0, len(names), 500):
            part = names[i : i + 500]
            marks = ",".join("?" * len(part))
            for f in self.conn.execute(f"SELECT * FROM model_files WHERE model IN ({marks})", part):
                files.setdefault(f["model"], {})[f["precision"]] = f
        return [row_to_info(r, files.get(r["name"])) for r in rows]

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM models").fetchone()[0])

    def match_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM matches").fetchone()[0])

    def stage(self) -> CurriculumStage:
        best = self.best()
        return stage_for(best["training_steps"] if best is not None else 0, self.cfg.curriculum)

    # ------------------------------------------------------------------ publish
    def check_header(self, h: coordinator_pb2.PublishHeader, max_bytes: int) -> str:
        """The precision of the file the header announces, once the header is consistent
        with the name and with what is stored (INVALID_ARGUMENT, FAILED_PRECONDITION for an
        fp16/int8 file of an unknown model, ALREADY_EXISTS for other content under a stored
        name and precision)."""
        parsed = parse_name(h.name)
        for key, got in (
            ("blocks", h.blocks),
            ("channels", h.channels),
            ("steps", h.training_steps),
            ("rows", h.training_rows),
        ):
            if got and got != parsed[key]:
                raise invalid(
                    f"header {key}={got} disagrees with the name {h.name!r} ({parsed[key]})"
                )
        try:  # a model of another input encoding would be handed to workers that cannot feed it
            check_feature_version(h.feature_version, f"model {h.name!r}")
        except FeatureVersionError as exc:
            raise invalid(str(exc)) from None
        try:
            precision = from_proto(h.precision)
        except ValueError as exc:
            raise invalid(f"header precision: {exc}") from None
        if not re.fullmatch(r"[0-9a-f]{64}", h.sha256):
            raise invalid("sha256 must be 64 lowercase hex digits")
        if not 0 < h.size_bytes <= max_bytes:
            raise invalid(f"size_bytes {h.size_bytes} outside 1..{max_bytes}")
        if precision != FP32 and self.get(h.name) is None:
            raise CoordinatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"model {h.name!r} is unknown: publish its {FP32} file first (it creates the "
                f"model; a {precision} file is added to it)",
            )
        existing = self._stored_sha(h.name, precision)
        if existing is not None and existing != h.sha256:
            raise CoordinatorError(
                grpc.StatusCode.ALREADY_EXISTS,
                f"model {h.name!r} already has a {precision} file with different content",
            )
        return precision

    def _stored_sha(self, name: str, precision: str) -> str | None:
        if precision == FP32:  # the models row: also right for an index not yet migrated
            row = self.get(name)
            return row["sha256"] if row is not None else None
        row = self.conn.execute(
            "SELECT sha256 FROM model_files WHERE model = ? AND precision = ?", (name, precision)
        ).fetchone()
        return row["sha256"] if row is not None else None

    def existing_same(self, h: coordinator_pb2.PublishHeader) -> common_pb2.ModelInfo | None:
        """The model, when the file the header announces is stored already."""
        if self._stored_sha(h.name, from_proto(h.precision)) != h.sha256:
            return None
        return self.info(h.name)

    def commit(self, h: coordinator_pb2.PublishHeader, tmp: Path) -> Committed:
        """Move the checked file in place and register it."""
        precision = from_proto(h.precision)
        # Checked again here, on the storage thread: a concurrent publish of the same name may
        # have committed since check_header, and its file must not be replaced.
        stored = self._stored_sha(h.name, precision)
        if stored is not None:
            if stored != h.sha256:
                raise CoordinatorError(
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"model {h.name!r} already has a {precision} file with different content",
                )
            info = self.info(h.name)
            return Committed(info, info.status == common_pb2.MODEL_STATUS_CANDIDATE, False)
        if precision != FP32:
            return self._add_file(h, precision, tmp)
        parsed = parse_name(h.name)
        final = self.file_path(h.name)
        tmp.replace(final)
        fsync_dir(self.models_dir)
        best = self.best()
        now = now_ms()
        release_now = best is None or not self.cfg.gating_enabled
        with db.transaction(self.conn):
            self.conn.execute(
                "INSERT INTO models (name, sha256, size_bytes, blocks, channels, training_steps, "
                "training_rows, feature_version, "
                "status, elo, created_ms, released_ms, run) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "?, ?, ?)",
                (
                    h.name,
                    h.sha256,
                    h.size_bytes,
                    parsed["blocks"],
                    parsed["channels"],
                    parsed["steps"],
                    parsed["rows"],
                    h.feature_version,
                    "released" if release_now else "candidate",
                    best["elo"] if best is not None else 0.0,
                    now,
                    now if release_now else 0,
                    self.cfg.run,
                ),
            )
            self._insert_file(h, FP32, now)
            if not release_now:
                assert best is not None
                self.conn.execute(
                    "INSERT INTO matches (candidate, reference, games_target, created_ms) VALUES "
                    "(?, ?, ?, ?)",
                    (h.name, best["name"], self.cfg.gating_games, now),
                )
            else:
                self._supersede_stale()  # gating off: matches left from before are obsolete
        return Committed(self.info(h.name), not release_now, release_now)

    def _insert_file(self, h: coordinator_pb2.PublishHeader, precision: str, now: int) -> None:
        self.conn.execute(
            "INSERT INTO model_files (model, precision, sha256, size_bytes, created_ms) "
            "VALUES (?, ?, ?, ?, ?)",
            (h.name, precision, h.sha256, h.size_bytes, now),
        )

    def _add_file(self, h: coordinator_pb2.PublishHeader, precision: str, tmp: Path) -> Committed:
        """Store an fp16/int8 file of a known model; its status and gating stay as they are."""
        if self.get(h.name) is None:  # check_header saw it; nothing deletes models
            raise not_found(f"unknown model {h.name!r}")
        tmp.replace(self.file_path(h.name, precision))
        fsync_dir(self.models_dir)
        with db.transaction(self.conn):
            self._insert_file(h, precision, now_ms())
        info = self.info(h.name)
        best = self.best()
        # The current release gained a file: WatchModels sends it again with its files.
        current = best is not None and best["name"] == h.name
        return Committed(info, info.status == common_pb2.MODEL_STATUS_CANDIDATE, current)

    # ------------------------------------------------------------------ gating
    def tally(self, match_id: int, fresh: bool = False) -> quorum.Tally:
        """The games a decision on the match counts (:mod:`kgrpc.coordinator.quorum`): with
        the outliers found at its last report, or found again (``fresh``: deciding)."""
        return quorum.tally(
            self.conn,
            match_id,
            self.cfg.gating_min_tokens,
            self.cfg.gating_outlier_p,
            fresh=fresh,
        )

    def _counts(self, match_id: int) -> tuple[int, int, int]:
        c = self.tally(match_id).counted
        return c.wins, c.losses, c.draws

    def next_match_task(self, worker_id: str, token_id: int | None = None) -> MatchTaskSpec | None:
        """A chunk of the oldest pending match that still needs games, if any, for a worker
        of ``token_id``. With ``gating_min_tokens`` above 1 a token gets a second chunk of a
        match only once that many tokens were handed one, and while a match waits for
        games from more tokens, a token with none counted there gets a chunk beyond its
        games target."""
        # A chunk not fully reported within match_task_timeout_s goes back to the pool. What
        # is out is read from the index (match_tasks), not kept in memory, so replicas
        # sharing the index hand out each match's games once (the caller's transaction holds
        # the index's write lock).
        issued_since = now_ms() - int(self.cfg.match_task_timeout_s * 1000)
        quarantined = (
            token_id is not None
            and self.conn.execute(
                "SELECT 1 FROM token_quarantine WHERE token_id = ?", (token_id,)
            ).fetchone()
            is not None
        )
        if quarantined:
            return None  # its games would not count
        for m in self.conn.execute("SELECT * FROM matches WHERE decision = 'pending' ORDER BY id"):
            t = self.tally(m["id"])
            if token_id is not None and any(o.token_id == token_id for o in t.outliers):
                continue  # set aside on this match: its games would not count
            (out,) = self.conn.execute(
                "SELECT COALESCE(SUM(games - recorded), 0) FROM match_tasks "
                "WHERE match_id = ? AND recorded < games AND issued_ms >= ?",
                (m["id"], issued_since),
            ).fetchone()
            free = m["games_target"] - t.counted.games - out
            if self.cfg.gating_min_tokens > 1:
                issued = quorum.issued_tokens(self.conn, m["id"])
                if token_id in issued and len(issued) < self.cfg.gating_min_tokens:
                    continue  # other tokens first
                if free <= 0 and t.waiting and token_id not in issued:
                    free = self.cfg.match_chunk_games  # the quorum needs this token's games
            if free <= 0:
                continue
            games = min(self.cfg.match_chunk_games, free)
            games += games % 2
            task_id = f"match-{m['id']}-{uuid.uuid4().hex[:12]}"
            # Kept in the index: a report after a restart, on another replica or after the
            # chunk went stale is still checked against the worker it was issued to.
            self.conn.execute(
                "INSERT INTO match_tasks (task_id, match_id, worker_id, games, issued_ms) VALUES "
                "(?, ?, ?, ?, ?)",
                (task_id, m["id"], worker_id, games, now_ms()),
            )
            return MatchTaskSpec(task_id, m["candidate"], m["reference"], games)
        return None

    def check_report(
        self,
        req: coordinator_pb2.ReportMatchResultRequest,
        check_worker: Callable[[str], None] | None = None,
    ) -> tuple[sqlite3.Row, sqlite3.Row]:
        """The (match task, match) rows of a report that may be recorded: a match task issued
        to ``req.worker_id`` (``check_worker`` vouches that the caller may act for it), for
        the task's pairing, of a match not superseded; PERMISSION_DENIED, NOT_FOUND,
        INVALID_ARGUMENT or FAILED_PRECONDITION (:data:`SUPERSEDED_REASON`) else. Cheap: run
        before the records are replayed."""
        task = self.conn.execute(
            "SELECT * FROM match_tasks WHERE task_id = ?", (req.task_id,)
        ).fetchone()
        if task is None:
            raise denied(
                f"task {req.task_id!r} is not a match task this coordinator issued: results count "
                f"only for "
                "the match task (GetTask) issued to the reporting worker"
            )
        if task["worker_id"] != req.worker_id:
            raise denied(
                f"match task {req.task_id!r} was issued to worker {task['worker_id']!r}, not "
                f"{req.worker_id!r}"
            )
        if check_worker is not None:
            check_worker(req.worker_id)
        m = self.conn.execute("SELECT * FROM matches WHERE id = ?", (task["match_id"],)).fetchone()
        if m is None:
            raise not_found(f"the match of task {req.task_id!r} is gone")
        if (m["candidate"], m["reference"]) != (req.candidate_model, req.reference_model):
            raise invalid(
                f"task {req.task_id!r} is for {m['candidate']!r} vs "
                f"{m['reference']!r}, not {req.candidate_model!r} vs "
                f"{req.reference_model!r}"
            )
        if m["decision"] == "superseded":
            best = self.best()
            best_name = best["name"] if best is not None else "?"
            raise CoordinatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{SUPERSEDED_REASON}: the match {m['candidate']!r} vs {m['reference']!r} of task "
                f"{req.task_id!r} was superseded by the release of {best_name!r}; drop this task "
                "and its remaining games (nothing was recorded)",
                SUPERSEDED_REASON,
                {
                    "task_id": req.task_id,
                    "candidate": m["candidate"],
                    "reference": m["reference"],
                    "best": best_name,
                },
            )
        return task, m

    def report(
        self,
        req: coordinator_pb2.ReportMatchResultRequest,
        check_worker: Callable[[str], None] | None = None,
        token_id: int | None = None,
    ) -> ReportOutcome:
        """Record match games. They count only for a match task issued to ``req.worker_id``
        (``check_worker`` then vouches that the caller may act for that worker), at most as
        many new games as the task was issued for; idempotent per game id. Each new game is
        tied to ``token_id``, the reporting token (the quorum counts tokens)."""
        task, m = self.check_report(req, check_worker)
        for g in req.games:
            if not g.game_id:
                raise invalid("every match game needs a game_id")
            if g.candidate_color not in (common_pb2.COLOR_BLACK, common_pb2.COLOR_WHITE):
                raise invalid(f"game {g.game_id}: candidate_color must be black or white")
            if g.winner not in (
                common_pb2.COLOR_BLACK,
                common_pb2.COLOR_WHITE,
                common_pb2.COLOR_UNSPECIFIED,
            ):
                raise invalid(
                    f"game {g.game_id}: winner must be black, white or unspecified (a draw), got "
                    f"{g.winner}"
                )
            if not math.isfinite(g.score) or g.moves < 0:
                # SQLite stores NaN as NULL: the insert would fail with a NOT NULL error.
                raise invalid(
                    f"game {g.game_id}: score must be finite and moves >= 0, got score {g.score}, "
                    f"moves {g.moves}"
                )
        recorded = 0
        new_ids: list[str] = []
        with db.transaction(self.conn):
            for g in req.games:
                cur = self.conn.execute(
                    "INSERT INTO match_games (match_id, game_id, candidate_color, "
                    "winner, score, moves) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (m["id"], g.game_id, g.candidate_color, g.winner, g.score, g.moves),
                )
                recorded += cur.rowcount
                if cur.rowcount:
                    new_ids.append(g.game_id)
            quorum.record_reporter(
                self.conn, m["id"], new_ids, req.task_id, req.worker_id, token_id, now_ms()
            )
            if task["recorded"] + recorded > task["games"]:
                # Rolled back: one task cannot decide a match with more games than it was given.
                raise invalid(
                    f"match task {req.task_id!r} was issued for {task['games']} games; "
                    f"{task['recorded']} are "
                    f"recorded and this report adds {recorded} new ones"
                )
            if recorded:
                self.conn.execute(
                    "UPDATE match_tasks SET recorded = recorded + ? WHERE task_id = ?",
                    (recorded, req.task_id),
                )
        # Workers report game by game: the chunk's games not yet in stay out (counted as
        # issued, match_tasks.recorded < games) or a later GetTask would hand them out twice.
        if m["decision"] != "pending":
            return ReportOutcome(recorded, m["decision"])
        return self._decide(m, recorded)

    def _supersede_stale(self) -> list[int]:
        """Within the caller's transaction: supersede every pending match whose reference is
        not the current best, and match its candidate again against the best. Returns the
        superseded match ids."""
        best = self.best()
        if best is None:
            return []
        now = now_ms()
        stale = self.conn.execute(
            "SELECT * FROM matches WHERE decision = 'pending' AND reference != ? ORDER BY id",
            (best["name"],),
        ).fetchall()
        for m in stale:
            self.conn.execute(
                "UPDATE matches SET decision = 'superseded', decided_ms = ? WHERE id = ?",
                (now, m["id"]),
            )
            self.conn.execute(
                "INSERT INTO matches (candidate, reference, games_target, created_ms) "
                "VALUES (?, ?, ?, ?)",
                (m["candidate"], best["name"], m["games_target"], now),
            )
        return sorted({m["id"] for m in stale})

    def _decide(self, m: sqlite3.Row, recorded: int) -> ReportOutcome:
        t = self.tally(m["id"], fresh=True)
        w, lo, d = t.counted.wins, t.counted.losses, t.counted.draws
        cand = self.get(m["candidate"])
        ref = self.get(m["reference"])
        assert cand is not None and ref is not None
        decision = gating_decision(
            w,
            lo,
            d,
            games_target=m["games_target"],
            candidate_steps=cand["training_steps"],
            reference_steps=ref["training_steps"],
            elo_threshold=self.cfg.gating_elo_threshold,
            release_every_steps=self.cfg.release_every_steps,
            use_sprt=self.cfg.gating_sprt,
        )
        if t.waiting:  # too few tokens: no decision, however the games stand
            decision = "pending"
        est = elo.elo_interval(w, lo, d) if w + lo + d else None
        with db.transaction(self.conn):
            (now_decided,) = self.conn.execute(
                "SELECT decision FROM matches WHERE id = ?", (m["id"],)
            ).fetchone()
            if now_decided != "pending":
                # Decided meanwhile by another replica sharing the index: once is enough.
                return ReportOutcome(recorded, now_decided)
            quorum.store_outliers(self.conn, m["id"], t.outliers)
            if est is not None:
                self.conn.execute(
                    "UPDATE matches SET elo_diff = ?, elo_low = ?, elo_high = ? WHERE id = ?",
                    (est.elo, est.low, est.high, m["id"]),
                )
            if decision == "pending":
                return ReportOutcome(recorded, decision)
            now = now_ms()
            self.conn.execute(
                "UPDATE matches SET decision = ?, decided_ms = ? WHERE id = ?",
                (decision, now, m["id"]),
            )
            new_elo = ref["elo"] + (est.elo if est is not None else 0.0)
            self.conn.execute(
                "UPDATE models SET status = ?, elo = ?, released_ms = ? WHERE name = ?",
                (decision, new_elo, now if decision == "released" else 0, cand["name"]),
            )
            if decision == "released":
                self._supersede_stale()
        released = self.info(cand["name"]) if decision == "released" else None
        return ReportOutcome(recorded, decision, released)

    def match_summaries(
        self, offset: int = 0, limit: int = -1
    ) -> list[coordinator_pb2.MatchSummary]:
        """Gating matches, newest first: ``limit`` of them (-1: all) after skipping
        ``offset``."""
        out = []
        for m in self.conn.execute(
            "SELECT * FROM matches ORDER BY id DESC LIMIT ? OFFSET ?",
            (db.limit_rows(limit), max(0, offset)),
        ).fetchall():
            t = self.tally(m["id"])
            c = t.counted
            est = (m["elo_diff"], m["elo_low"], m["elo_high"])
            if t.quarantined and c.games:  # the figures of the games still counted
                e = elo.elo_interval(c.wins, c.losses, c.draws)
                est = (e.elo, e.low, e.high)
            summary = coordinator_pb2.MatchSummary(
                candidate_model=m["candidate"],
                reference_model=m["reference"],
                wins=c.wins,
                losses=c.losses,
                draws=c.draws,
                elo_diff=est[0],
                elo_low=est[1],
                elo_high=est[2],
                decision=m["decision"],
                tokens=t.tokens,
                waiting=t.waiting if m["decision"] == "pending" else "",
                recount=self._recount(m, t) if t.quarantined else "",
            )
            for o in t.outliers:
                summary.set_aside.add(
                    token_id=o.token_id,
                    why="outlier",
                    wins=o.counts.wins,
                    losses=o.counts.losses,
                    draws=o.counts.draws,
                    others_wins=o.others_wins,
                    others_games=o.others_games,
                    p_value=o.p_value,
                )
            for token, q in sorted(t.quarantined.items()):
                summary.set_aside.add(
                    token_id=token, why="quarantine", wins=q.wins, losses=q.losses, draws=q.draws
                )
            out.append(summary)
        return out

    def _recount(self, m: sqlite3.Row, t: quorum.Tally) -> str:
        """For a decided match: the decision its counted games give now, when it is not the
        one taken ("" otherwise). A quarantine reports a decision it would tip; it does not
        undo it (the fleet may have played the released model for days)."""
        if m["decision"] not in ("released", "rejected"):
            return ""
        cand, ref = self.get(m["candidate"]), self.get(m["reference"])
        if cand is None or ref is None:
            return ""
        c = t.counted
        now = gating_decision(
            c.wins,
            c.losses,
            c.draws,
            games_target=m["games_target"],
            candidate_steps=cand["training_steps"],
            reference_steps=ref["training_steps"],
            elo_threshold=self.cfg.gating_elo_threshold,
            release_every_steps=self.cfg.release_every_steps,
            use_sprt=self.cfg.gating_sprt,
        )
        if t.waiting:
            now = "pending"
        return now if now != m["decision"] else ""
