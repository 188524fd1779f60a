"""The read path of read-only RPCs and the dashboard: :class:`Reader`, a read-only connection
to the index on a thread of its own. What it runs sees the committed rows (WAL: it never
waits for, nor blocks, the storage thread that writes), so a slow listing neither waits
behind nor delays uploads' group commits and shard cuts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kgrpc.coordinator import db
from kgrpc.coordinator.views import Activity

T = TypeVar("T")


class Reader:
    """A read-only connection to the index on a thread of its own."""

    def __init__(self, data_dir: str | Path, index: str = "") -> None:
        self.data_dir = Path(data_dir)
        self.index = index
        self.activity = Activity()
        self._conn: sqlite3.Connection | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kgrpc-views")

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._conn is None:
            self._conn = db.connect(self.data_dir, readonly=True, index=self.index)
        return fn(self._conn, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(connection, *args)`` on the reader's thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(self._call, fn, args))

    async def close(self) -> None:
        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._pool, shut)
        self._pool.shutdown(wait=True)
