"""The durable spool: every finished game is on disk before it is uploaded, and leaves only
when the coordinator acknowledged it.

Layout: ``<spool>/<game_id>.game`` (a serialized ``GameRecord``), written via a temp file +
fsync + rename, so a crash leaves either the whole game or nothing. Rejected games move to
``<spool>/rejected/<game_id>.game`` next to ``<game_id>.reason.txt``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kgrpc.durable import atomic_write_bytes, fsync_dir
from kgrpc.v1 import records_pb2

SUFFIX = ".game"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class Spool:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.rejected_dir = self.dir / "rejected"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rejected_dir.mkdir(exist_ok=True)
        # Temp files of writes interrupted by a crash are garbage, never half games.
        for stale in self.dir.glob(".*.tmp"):
            stale.unlink(missing_ok=True)

    def _path(self, game_id: str) -> Path:
        if not _SAFE_ID.match(game_id):
            raise ValueError(f"game id {game_id!r} is not usable as a file name")
        return self.dir / f"{game_id}{SUFFIX}"

    def put(self, record: records_pb2.GameRecord) -> Path:
        path = self._path(record.game_id)
        atomic_write_bytes(path, record.SerializeToString())
        return path

    def pending_ids(self) -> list[str]:
        """Game ids waiting for an acknowledgement, oldest first.

        A ``.game`` file whose name is no game id (put there by hand) is moved to rejected/:
        it could be neither loaded nor acknowledged, and would block the queue forever."""
        entries = []
        for p in self.dir.glob(f"*{SUFFIX}"):
            if not _SAFE_ID.match(p.stem):
                self._quarantine(p, "corrupt_spool", "file name is not a game id")
                continue
            try:
                entries.append((p.stat().st_mtime_ns, p.stem))
            except FileNotFoundError:
                continue
        return [gid for _, gid in sorted(entries)]

    def count(self) -> int:
        return sum(1 for _ in self.dir.glob(f"*{SUFFIX}"))

    def load(self, game_id: str) -> records_pb2.GameRecord:
        record = records_pb2.GameRecord()
        record.ParseFromString(self._path(game_id).read_bytes())
        return record

    def load_bytes(self, game_id: str) -> bytes:
        return self._path(game_id).read_bytes()

    def acknowledge(self, game_id: str) -> None:
        """The coordinator stored it (ACCEPTED or DUPLICATE): forget it."""
        self._path(game_id).unlink(missing_ok=True)
        fsync_dir(self.dir)

    def reject(self, game_id: str, reason: str, detail: str = "") -> None:
        """Failed validation: keep it aside with the reason; it is never sent again."""
        self._quarantine(self._path(game_id), reason, detail)

    def _quarantine(self, src: Path, reason: str, detail: str) -> None:
        if not src.exists():
            return
        atomic_write_bytes(
            self.rejected_dir / f"{src.stem}.reason.txt", f"{reason}\n{detail}\n".encode()
        )
        os.replace(src, self.rejected_dir / src.name)
        fsync_dir(self.dir)
        fsync_dir(self.rejected_dir)

    def rejected_ids(self) -> list[str]:
        return sorted(p.stem for p in self.rejected_dir.glob(f"*{SUFFIX}"))
