"""Training data: find shards and load the newest window of games.

Shards are the coordinator's ``DATA_DIR/training_data/<run>/games_NNNNN.npz`` files, keys and
dtypes as in docs/formats.md section 4 (``states`` packed planes, ``globals``, ``policy``,
``value``, ``score``, ``ownership``, ``game_index``, ``game_ids``, ``board_size`` ...), read
only through ``kgrpc.shards``, which checks the format and feature versions, keys, dtypes and
shapes. The rolling ``training_data/current/`` copy is skipped: it duplicates rows of the run
shards.

Order: shards are ordered oldest to newest by (modification time, run, index); the window is the
newest ``window_games`` games, and at most ``max_rows`` rows when the growing window
(:func:`trainer.schedule.window_rows`) sets that: the newest whole games holding at least
``max_rows`` rows. Either cut falls at a game boundary inside the oldest shard it touches.

The window holds each board size's rows as arrays (:class:`SizeArrays`), with the targets
derived per shard (:mod:`trainer.targets`). Batches are cut from it by :mod:`trainer.batches`
(order, augmentation through :mod:`trainer.augment`), built ahead of the training step by
:mod:`trainer.loader`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kgrpc import shards
from trainer.targets import SHORT_VALUE_LAMBDA, reply_rows, short_value_returns
from trainer.withheld import Withheld

# A shard file is unreadable or does not follow docs/formats.md section 4 (or is of another
# format or feature version).
ShardError = shards.ShardFormatError

ROW_KEYS = ("states", "globals", "policy", "value", "score", "ownership")  # the ones trained on
# Read besides, for the short-term value target (short_value_returns).
RETURN_KEYS = ("game_index", "move_number", "root_value")
_SHARD_RE = re.compile(r"^games_(\d+)\.npz$")
SKIP_RUNS = frozenset({"current"})
log = logging.getLogger("kgrpc.train.data")


@dataclass(frozen=True)
class ShardFile:
    path: Path
    run: str
    index: int
    mtime_ns: int
    size_bytes: int
    rows: int
    games: int
    board_size: int
    sha256: str = ""  # as the index lists it (store mode, trainer.store_shards); "" for files


def _read_header(path: Path) -> tuple[int, int, int]:
    """(rows, games, board_size), reading only the small members of the npz."""
    try:
        h = shards.read_header(path)
    except OSError as exc:
        raise ShardError(f"{path}: unreadable shard: {exc}") from exc
    return h.rows, h.games, h.board_size


class ShardIndex:
    """The shards under ``data_dir/training_data``; headers cached by (path, size, mtime).

    A file that is not a valid shard raises :class:`ShardError` when ``strict``; otherwise it is
    logged once, listed in ``errors`` and skipped, so one bad file cannot stop a long run.
    The shards a token quarantine withholds are left out (:mod:`trainer.withheld`).
    """

    def __init__(
        self, data_dir: str | os.PathLike[str], runs: Iterable[str] = (), strict: bool = False
    ) -> None:
        self.root = Path(data_dir) / "training_data"
        self.runs = list(runs)
        self.strict = strict
        self.errors: dict[Path, str] = {}
        self._headers: dict[Path, tuple[int, int, tuple[int, int, int]]] = {}
        self.shards: list[ShardFile] = []
        self.withheld = Withheld(data_dir)

    def refresh(self) -> list[ShardFile]:
        found: list[ShardFile] = []
        if self.root.is_dir():
            run_dirs = (
                [self.root / r for r in self.runs]
                if self.runs
                else sorted(
                    p for p in self.root.iterdir() if p.is_dir() and p.name not in SKIP_RUNS
                )
            )
            for run_dir in run_dirs:
                if not run_dir.is_dir():
                    continue
                for p in run_dir.iterdir():
                    m = _SHARD_RE.match(p.name)
                    if not m:
                        continue  # temp files of an in-progress atomic write, other files
                    try:
                        st = p.stat()
                    except FileNotFoundError:
                        continue  # removed since the listing
                    cached = self._headers.get(p)
                    if cached and cached[:2] == (st.st_size, st.st_mtime_ns):
                        header = cached[2]
                    else:
                        try:
                            header = _read_header(p)
                        except ShardError as exc:
                            if self.strict:
                                raise
                            if self.errors.get(p) != str(exc):
                                log.error("skipping shard: %s", exc)
                            self.errors[p] = str(exc)
                            continue
                        self._headers[p] = (st.st_size, st.st_mtime_ns, header)
                    found.append(
                        ShardFile(
                            p, run_dir.name, int(m.group(1)), st.st_mtime_ns, st.st_size, *header
                        )
                    )
        found = self.withheld.keep(found)
        found.sort(key=lambda s: (s.mtime_ns, s.run, s.index))
        self.shards = found
        return found

    @property
    def total_rows(self) -> int:
        return sum(s.rows for s in self.shards)


@dataclass
class SizeArrays:
    """All window rows of one board size."""

    size: int
    states: np.ndarray  # uint8 [R, packed_row_bytes]
    globals: np.ndarray  # float32 [R, NUM_GLOBALS]
    policy: np.ndarray  # float32 [R, N*N+1]
    value: np.ndarray  # float32 [R]
    score: np.ndarray  # float32 [R]
    ownership: np.ndarray  # int8 [R, N*N]
    short_value: np.ndarray | None = None  # float32 [R], short_value_returns (None: not read)
    # bool [R]: the row after it is the opponent's reply in the same game (reply_rows).
    has_reply: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.value.shape[0])


@dataclass
class Window:
    by_size: dict[int, SizeArrays]
    games: int
    shards: list[ShardFile] = field(default_factory=list)
    # (rank, world) of the shard split it holds: (0, 1) = the whole window, every rank takes
    # every world-th batch; else this rank's disjoint shards, all of whose batches it trains.
    part: tuple[int, int] = (0, 1)

    @property
    def rows(self) -> int:
        return sum(a.rows for a in self.by_size.values())

    @property
    def main_board_size(self) -> int:
        """The size with the most rows (used for the parity check and export metadata)."""
        return max(self.by_size.values(), key=lambda a: a.rows).size


def load_shard_rows(
    path: Path, short_value_lambda: float = SHORT_VALUE_LAMBDA
) -> tuple[dict[str, np.ndarray], np.ndarray, int, int]:
    """(row arrays, game_index, games, board_size), checked by ``kgrpc.shards``; the row
    arrays are ROW_KEYS and ``short_value`` (:func:`short_value_returns`)."""
    try:
        data = shards.load_shard(path, arrays=(*ROW_KEYS, *RETURN_KEYS))
    except OSError as exc:
        raise ShardError(f"{path}: unreadable shard: {exc}") from exc
    arrs = {k: data[k] for k in ROW_KEYS}
    arrs["short_value"] = short_value_returns(
        data["game_index"],
        data["move_number"],
        data["root_value"],
        data["value"],
        short_value_lambda,
    )
    # Games are whole in a window (it keeps or drops a shard's games, never part of one), so
    # row i + 1 stays the reply after the shards are cut and joined.
    arrs["has_reply"] = reply_rows(data["game_index"], data["move_number"])
    return arrs, data["game_index"], int(data["game_ids"].shape[0]), int(data["board_size"])


class WindowLoader:
    """Builds :class:`Window` objects, keeping loaded shards in memory between generations."""

    # Store mode (trainer.store_shards.use_store): fetches a shard's file before it is first
    # loaded, and this process loads only its (rank, world) share of the window's shards.
    fetch: Callable[[ShardFile], Path] | None = None
    rank, world = 0, 1

    def __init__(
        self,
        window_games: int,
        strict: bool = False,
        short_value_lambda: float = SHORT_VALUE_LAMBDA,
    ) -> None:
        self.window_games = window_games
        self.strict = strict  # else a shard with bad arrays is logged and left out
        self.short_value_lambda = short_value_lambda
        self.bad: set[Path] = set()
        self._cache: dict[tuple[Path, int], tuple[dict[str, np.ndarray], np.ndarray, int, int]] = {}

    def load(self, shards: list[ShardFile], max_rows: int | None = None) -> Window:
        """The newest ``window_games`` games of ``shards``, and no more whole games than
        needed to hold ``max_rows`` rows when it is given."""
        chosen: list[tuple[ShardFile, int]] = []  # (shard, first game index kept)
        games = rows = 0
        for s in reversed([s for s in shards if s.path not in self.bad]):
            if games >= self.window_games or (max_rows is not None and rows >= max_rows):
                break
            keep = min(s.games, self.window_games - games)
            chosen.append((s, s.games - keep))
            games += keep
            rows += s.rows
        # Rows still wanted from each chosen shard, newest first (for the oldest one's cut).
        wanted: list[int | None] = []
        left = max_rows
        for s, _ in chosen:
            wanted.append(left)
            left = None if left is None else left - s.rows
        parts: dict[int, list[dict[str, np.ndarray]]] = {}
        cache: dict[tuple[Path, int], tuple[dict[str, np.ndarray], np.ndarray, int, int]] = {}
        games = 0
        kept: list[ShardFile] = []
        part, skip = (0, 1), set()
        if self.fetch is not None:
            from trainer.store_shards import fetch_part

            part, skip = fetch_part(self, [s for s, _ in chosen])
        for (s, first_game), want in reversed(list(zip(chosen, wanted, strict=True))):
            if s.index % part[1] != part[0] or s.path in skip:
                continue  # another rank's shard, or one the store could not give
            key = (s.path, s.mtime_ns)
            entry = self._cache.get(key)
            if entry is None:
                try:
                    entry = load_shard_rows(s.path, self.short_value_lambda)
                except ShardError as exc:
                    if self.strict:
                        raise
                    log.error("leaving out shard: %s", exc)
                    self.bad.add(s.path)  # the next window replaces its games with older ones
                    continue
            cache[key] = entry
            arrs, game_index, shard_games, n = entry
            if want is not None and want < len(game_index):
                first_game = max(first_game, first_game_for_rows(game_index, shard_games, want))
            if first_game > 0:
                sel = game_index >= first_game
                arrs = {k: v[sel] for k, v in arrs.items()}
            parts.setdefault(n, []).append(arrs)
            games += shard_games - first_game
            kept.append(s)
        self._cache = cache  # shards that left the window are dropped
        by_size = {}
        for n, plist in parts.items():
            cat = {k: np.concatenate([p[k] for p in plist]) for k in plist[0]}
            if cat["value"].shape[0]:
                by_size[n] = SizeArrays(n, **cat)
        return Window(by_size, games, kept, part)


def first_game_for_rows(game_index: np.ndarray, games: int, rows: int) -> int:
    """The highest game index g such that games g.. hold at least ``rows`` rows (0 if none)."""
    per_game = np.bincount(game_index, minlength=games)
    from_end = np.cumsum(per_game[::-1])  # rows of the last k+1 games
    enough = np.nonzero(from_end >= rows)[0]
    return 0 if len(enough) == 0 else games - 1 - int(enough[0])
