"""The shards a token quarantine withholds, for a trainer that reads the coordinator's data
directory in place (``kgrpc-train run --data-dir DATA_DIR``: what ``kgrpc-cluster`` and
``make demo`` run).

``kgrpc-coordinator token quarantine`` marks a token's games in the index; the shards that
hold any of them (:func:`kgrpc.coordinator.quorum.excluded_shards`, the one rule) leave
``ListShards``, the store-mode listing (:mod:`trainer.store_shards`), the coordinator's
``latest_games.npz`` and, here, the listing of :class:`trainer.data.ShardIndex`: so the next
window holds none of their rows, and all of them again once ``token unquarantine`` lifts it.
The index is what the command changes and what every other path reads, in one transaction: a
trainer reading it (read-only, at each listing) needs no copy of the quarantine that could lag
behind it, nor a coordinator running to write one. Nothing is moved or deleted: the files stay
where the coordinator put them.

With an index, a file is listed only once the index has its row, as ``ListShards`` and store
mode list rows: a cut's file is on disk a moment before its row and its games' shard numbers
are written (one transaction), and until then nothing says whether it holds a quarantined
token's games. A file the index never names (one a crashed cut left, which the coordinator's
recovery adopts or removes at its next start) is not trained on either.

Which index: the SQLite file of the data directory (``DATA_DIR/coordinator.sqlite3``) when
there is one, found by itself; a directory of shards without one (a ``--pull-shards`` cache,
whose pull sets withheld shards aside itself, or plain shard files) lists every shard. A
coordinator on PostgreSQL keeps no index in its data directory: the trainer cannot see its
quarantine there and says so once; run it in store mode (``--index URL --store DATA_DIR``),
which honours it.

When the index cannot be read (a locked or missing file, PostgreSQL restarting), the last
listing it gave stands (before any, no shard is listed) and the error is logged; the next
listing reads it again.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgrpc.coordinator.db import DB_NAME
from kgrpc.coordinator.replica import ID_FILE

if TYPE_CHECKING:
    from trainer.data import ShardFile

log = logging.getLogger("kgrpc.train.data")
INDEXED = "SELECT run, idx FROM shards"


class Withheld:
    """Filters a listing of the data directory's shards (:meth:`keep`)."""

    def __init__(self, data_dir: str | os.PathLike[str], index: str = "") -> None:
        self.data_dir = Path(data_dir)
        self.index = index  # "": the data directory's SQLite file, if any
        # (run, shard number) of the shards the index listed, and of those withheld, at the
        # last read.
        self.indexed: set[tuple[str, int]] = set()
        self.held: set[tuple[str, int]] = set()
        self._conn: Any = None
        self._said = ""  # the last thing logged, so a standing condition is said once

    def _say(self, level: int, msg: str, *args: object) -> None:
        text = msg % args
        if text != self._said:
            log.log(level, "%s", text)
            self._said = text

    def _connect(self) -> Any:
        """The read-only index connection, or None without an index to read."""
        if self._conn is None:
            target = self.index
            if not target:
                if not (self.data_dir / DB_NAME).is_file():
                    if (self.data_dir / ID_FILE).is_file():
                        self._say(
                            logging.WARNING,
                            "%s is a coordinator's data directory without its index (on "
                            "PostgreSQL?): token quarantines cannot be honoured here; run the "
                            "trainer in store mode (--index URL --store DIR) instead",
                            self.data_dir,
                        )
                    return None
                target = str(self.data_dir)
            from trainer.store_shards import connect_index

            self._conn = connect_index(target)
        return self._conn

    def keep(self, found: list[ShardFile]) -> list[ShardFile]:
        """``found`` less the files the index does not list and the shards a token
        quarantine withholds (all of ``found`` without an index)."""
        runs = sorted({s.run for s in found})
        try:
            conn = self._connect()
            if conn is None:
                return found
            from kgrpc.coordinator.quorum import excluded_shards

            # Rows first: a shard indexed between the two reads is in neither, or in both
            # (withheld if it must be), never listed without its games' check.
            self.indexed = {(str(r[0]), int(r[1])) for r in conn.execute(INDEXED)}
            self.held = {(run, i) for run in runs for i in excluded_shards(conn, run)}
            if not self.held:
                self._said = ""  # a later quarantine is said again
        except (sqlite3.Error, ValueError) as exc:  # pg.IndexUnavailable is an OperationalError
            self._say(
                logging.ERROR,
                "reading the shards and token quarantine from the index failed (its last "
                "listing stands): %s",
                exc,
            )
            self.close()  # connect again at the next listing
        listed = self.indexed - self.held
        kept = [s for s in found if (s.run, s.index) in listed]
        held = sum((s.run, s.index) in self.held for s in found)
        if held:
            self._say(
                logging.WARNING,
                "%d shards hold games of a quarantined token: left out of the window",
                held,
            )
        return kept

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
