"""Model registry: files under DATA_DIR/models/, the ``models`` and ``model_files`` rows,
publishing, releases, curriculum.

A published model is ``DATA_DIR/models/NAME.onnx`` (moved there atomically after its
size, sha256 and contents were checked: :mod:`kgrpc.coordinator.model_check`) plus a
``models`` row. The first model of a run is released at once; later ones are candidates with
a gating match against the current best (``matches`` rows, decided by
:mod:`kgrpc.coordinator.gating`), unless ``gating_enabled`` is false.

A model has one file per precision (kgrpc/precision.py), each a ``model_files`` row: its fp32
file (``NAME.onnx``, published first: it creates the model) and, published later, its fp16
and int8 files (``NAME.fp16.onnx``, ``NAME.int8.onnx``). Adding a file changes neither the
model's status nor its gating: release and gating concern the model, whose files are one
network in several number formats. ``ModelInfo.files`` lists them; ``ModelInfo.sha256`` and
``size_bytes`` stay the fp32 file's.

Releases are monotone: a pending match always has the current best as its reference. Every
release (and start-up, for an index written by older versions) supersedes the pending
matches against an older reference (:meth:`Models.supersede_stale`): their decision becomes
``superseded`` and each of their candidates gets a new match, from 0 games, against the new
best.

All methods block; call them from the storage thread only.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from kgrpc.coordinator import db, model_check
from kgrpc.coordinator.config import Config
from kgrpc.coordinator.config_values import CurriculumStage
from kgrpc.coordinator.errors import CoordinatorError, invalid, not_found
from kgrpc.durable import fsync_dir
from kgrpc.precision import FP32, PRECISIONS, from_proto, to_proto, variant_file_name
from kgrpc.protocol import PRECISION_ABSENT
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


# The match decisions that rate a candidate (gating.py writes them with the Elo); a
# superseded match was abandoned for a new one against a newer best and rated nothing.
DECIDED = ("released", "rejected")


def elo_measured(conn: sqlite3.Connection, rows: list[sqlite3.Row]) -> set[str]:
    """The names among ``models`` rows whose Elo is known (``ModelInfo.elo_measured``): its
    run's first model (the anchor, 0 by definition) and every candidate a decided gating
    match rated. A release made without a match (gating off or skipped) carries its
    predecessor's Elo, which measures nothing. Two short queries per call, not per model."""
    names = [r["name"] for r in rows]
    measured: set[str] = set()
    for i in range(0, len(names), 500):
        part = names[i : i + 500]
        marks = ",".join("?" * len(part))
        measured.update(
            r[0]
            for r in conn.execute(
                f"SELECT DISTINCT candidate FROM matches WHERE decision IN (?, ?) "
                f"AND candidate IN ({marks})",
                (*DECIDED, *part),
            )
        )
    for run in {r["run"] for r in rows}:
        first = conn.execute(
            "SELECT name FROM models WHERE run = ? ORDER BY created_ms, rowid LIMIT 1", (run,)
        ).fetchone()
        if first is not None:
            measured.add(first[0])
    return measured


def row_to_info(
    r: sqlite3.Row, files: dict[str, sqlite3.Row] | None = None, measured: bool = False
) -> common_pb2.ModelInfo:
    """The ModelInfo of a ``models`` row with its ``model_files`` rows by precision (the fp32
    file from the ``models`` row where that row is missing: an index not yet migrated);
    ``measured``: its Elo is known (:func:`elo_measured`)."""
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
        elo_measured=measured,
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
class Models:
    conn: sqlite3.Connection
    models_dir: Path
    cfg: Config

    def __post_init__(self) -> None:
        # Publishing checks every model with onnx/onnxruntime (model_check): a coordinator
        # that could not check would store models no worker may be able to load.
        model_check.require_runtime()
        with db.transaction(self.conn):
            stale = self.supersede_stale()
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
        return row_to_info(row, files, row["name"] in elo_measured(self.conn, [row]))

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
        measured = elo_measured(self.conn, rows)
        return [row_to_info(r, files.get(r["name"]), r["name"] in measured) for r in rows]

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM models").fetchone()[0])

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
                self.supersede_stale()  # gating off: matches left from before are obsolete
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

    # ------------------------------------------------------------------ releases
    def supersede_stale(self) -> list[int]:
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
