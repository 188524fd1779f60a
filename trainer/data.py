"""Training data: find shards, load the newest window of games, augment, batch in the background.

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

Batches: every batch holds one board size (the net is fully convolutional but a tensor needs one
shape). Each epoch shuffles the rows of each size, cuts them into batches, shuffles the batch
order, and under DistributedDataParallel rank r takes batches r, r+K, r+2K ... of that common
plan, so the K processes see disjoint data. The stream is endless: a generation trains a fixed
number of steps, whatever the window size.

Augmentation: one of the 8 symmetries (docs/formats.md section 3) per sample, applied to the
planes, the policy's board part and the ownership target with one ``torch.gather`` per array:
a symmetry of an N x N board is a permutation of its N*N points, precomputed for all 8.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from kgrpc import shards
from kgrpc.schema import NUM_PLANES, packed_row_bytes

# A shard file is unreadable or does not follow docs/formats.md section 4 (or is of another
# format or feature version).
ShardError = shards.ShardFormatError

NUM_SYMMETRIES = 8
ROW_KEYS = ("states", "globals", "policy", "value", "score", "ownership")  # the ones trained on
# Read besides, for the short-term value target (short_value_returns).
RETURN_KEYS = ("game_index", "move_number", "root_value")
# The short-term value's default lambda (trainer setting short_value_lambda): at 25% full
# searches a row is about 4 moves from the next, so 0.75 weighs the next few rows of a game
# (KataGo's short-term targets look about 6 and 16 moves ahead).
SHORT_VALUE_LAMBDA = 0.75
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


def short_value_returns(
    game_index: np.ndarray,
    move_number: np.ndarray,
    root_value: np.ndarray,
    value: np.ndarray,
    lam: float,
) -> np.ndarray:
    """float32 [R]: each row's short-term value, mover's view. Over the rows of its game in
    move order, G_i = (1 - lam) * v_i + lam * G_next, with v the search's root value (sign
    flipped for the other mover) and, past the game's last row, the result: lam = 0 is the
    row's own search value, lam -> 1 the game result. The searched rows are what a shard
    holds (full searches only), so the horizon is counted in rows."""
    out = np.empty(len(value), dtype=np.float32)
    order = np.lexsort((move_number, game_index))
    nxt_g: float | None = None  # G of the next row of the same game, mover's view there
    prev_game, prev_move = -1, 0
    for i in order[::-1]:
        g, m = int(game_index[i]), int(move_number[i])
        if g != prev_game:
            tail = float(value[i])  # the result, this row's mover's view
        else:
            assert nxt_g is not None
            tail = nxt_g if (prev_move - m) % 2 == 0 else -nxt_g
        nxt_g = (1.0 - lam) * float(root_value[i]) + lam * tail
        out[i] = nxt_g
        prev_game, prev_move = g, m
    return out


def reply_rows(game_index: np.ndarray, move_number: np.ndarray) -> np.ndarray:
    """bool [R]: row i + 1 is the very next move of row i's game, so its search target is
    the opponent's reply to the position of row i (the opponent-reply policy target). A
    shard holds full searches only, so about full_search_prob of rows have one."""
    out = np.zeros(len(game_index), dtype=bool)
    if len(game_index) > 1:
        out[:-1] = (game_index[1:] == game_index[:-1]) & (move_number[1:] == move_number[:-1] + 1)
    return out


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


# ---------------------------------------------------------------------------------------------
# Symmetries


def symmetry_permutations(size: int) -> np.ndarray:
    """int64 [8, N*N]: ``out.flat[i] = in.flat[perm[sym, i]]`` for symmetry ``sym``.

    sym = 4*flip + rot: ``np.rot90`` by ``rot`` on the last two axes, then a transpose when
    ``flip`` (docs/formats.md section 3). Applying a symmetry to the point ids themselves
    yields, at each output point, the id of the input point that lands there.
    """
    ids = np.arange(size * size).reshape(size, size)
    perms = []
    for sym in range(NUM_SYMMETRIES):
        t = np.rot90(ids, sym % 4, axes=(0, 1))
        if sym >= 4:
            t = t.T
        perms.append(t.reshape(-1))
    return np.stack(perms).astype(np.int64)


_PERM_CACHE: dict[int, torch.Tensor] = {}


def _perms(size: int) -> torch.Tensor:
    p = _PERM_CACHE.get(size)
    if p is None:
        p = _PERM_CACHE[size] = torch.from_numpy(symmetry_permutations(size))
    return p


def apply_symmetries(
    planes: torch.Tensor, policy: torch.Tensor, ownership: torch.Tensor, syms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample symmetries: planes [B, C, N*N], policy [B, N*N+1], ownership [B, N*N]."""
    b, c, nn = planes.shape
    size = int(round(nn**0.5))
    perm = _perms(size)[syms.long()]  # [B, N*N]
    planes = torch.gather(planes, 2, perm[:, None, :].expand(b, c, nn))
    board = torch.gather(policy[:, :nn], 1, perm)
    policy = torch.cat([board, policy[:, nn:]], dim=1)
    ownership = torch.gather(ownership, 1, perm)
    return planes, policy, ownership


# ---------------------------------------------------------------------------------------------
# Batches


@dataclass
class Batch:
    """Tensors ready for the net (CPU; pinned when the trainer runs on CUDA)."""

    board_size: int
    planes: torch.Tensor  # float32 [B, NUM_PLANES, N, N]
    globals: torch.Tensor  # float32 [B, NUM_GLOBALS]
    policy: torch.Tensor  # float32 [B, N*N+1]
    value: torch.Tensor  # float32 [B]
    score: torch.Tensor  # float32 [B]
    ownership: torch.Tensor  # float32 [B, N, N]
    short_value: torch.Tensor | None = None  # float32 [B] (SizeArrays.short_value)
    # The opponent's reply: its search target [B, N*N+1] (zeros where none) and which rows
    # have one [B] (SizeArrays.has_reply).
    opp_policy: torch.Tensor | None = None
    opp_mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.value.shape[0])

    def to(self, device: torch.device) -> Batch:
        if device.type == "cpu":
            return self
        kw = {"device": device, "non_blocking": True}
        return Batch(
            self.board_size,
            self.planes.to(**kw),
            self.globals.to(**kw),
            self.policy.to(**kw),
            self.value.to(**kw),
            self.score.to(**kw),
            self.ownership.to(**kw),
            None if self.short_value is None else self.short_value.to(**kw),
            None if self.opp_policy is None else self.opp_policy.to(**kw),
            None if self.opp_mask is None else self.opp_mask.to(**kw),
        )


def make_batch(
    arrs: SizeArrays, idx: np.ndarray, rng: np.random.Generator | None, pin: bool = False
) -> Batch:
    """Gather rows ``idx``, unpack planes, apply a random symmetry per sample if ``rng``."""
    n = arrs.size
    nn = n * n
    idx = np.sort(idx)  # sequential memory access; order inside a batch does not matter
    b = len(idx)
    packed = arrs.states[idx]
    if packed.shape[1] != packed_row_bytes(n):
        # np.unpackbits would silently pad a short row with zeros.
        raise ShardError(
            f"states rows are {packed.shape[1]} bytes, expected "
            f"{packed_row_bytes(n)} for board size {n}"
        )
    planes = torch.from_numpy(
        np.unpackbits(packed, axis=1, count=NUM_PLANES * nn).reshape(b, NUM_PLANES, nn)
    )
    policy = torch.from_numpy(arrs.policy[idx])
    ownership = torch.from_numpy(arrs.ownership[idx])
    opp_policy = opp_mask = None
    if arrs.has_reply is not None:
        has = arrs.has_reply[idx]
        reply = np.zeros((b, policy.shape[1]), dtype=np.float32)
        reply[has] = arrs.policy[idx[has] + 1]
        opp_policy, opp_mask = torch.from_numpy(reply), torch.from_numpy(has)
    if rng is not None:
        syms = torch.from_numpy(rng.integers(0, NUM_SYMMETRIES, b))
        planes, policy, ownership = apply_symmetries(planes, policy, ownership, syms)
        if opp_policy is not None:  # the reply's board turns with the position's
            board = torch.gather(opp_policy[:, :nn], 1, _perms(n)[syms.long()])
            opp_policy = torch.cat([board, opp_policy[:, nn:]], dim=1)
    batch = Batch(
        n,
        planes.reshape(b, NUM_PLANES, n, n).float(),
        torch.from_numpy(arrs.globals[idx]),
        policy.contiguous(),
        torch.from_numpy(arrs.value[idx]),
        torch.from_numpy(arrs.score[idx]),
        ownership.reshape(b, n, n).float(),
        None if arrs.short_value is None else torch.from_numpy(arrs.short_value[idx]),
        opp_policy,
        opp_mask,
    )
    if pin:
        batch = Batch(
            n,
            *(
                t.pin_memory()
                for t in (
                    batch.planes,
                    batch.globals,
                    batch.policy,
                    batch.value,
                    batch.score,
                    batch.ownership,
                )
            ),
            None if batch.short_value is None else batch.short_value.pin_memory(),
            None if batch.opp_policy is None else batch.opp_policy.pin_memory(),
            None if batch.opp_mask is None else batch.opp_mask.pin_memory(),
        )
    return batch


def batch_plan(
    window: Window, batch_size: int, seed: int, rank: int = 0, world: int = 1
) -> Iterator[tuple[int, np.ndarray]]:
    """Endless (board_size, row indices) stream; see the module docstring for the order."""
    if window.rows == 0:
        raise ValueError("the training window is empty")
    epoch = 0
    while True:
        rng = np.random.default_rng([seed, epoch])
        plan: list[tuple[int, np.ndarray]] = []
        for n in sorted(window.by_size):
            rows = window.by_size[n].rows
            perm = rng.permutation(rows)
            if rows < batch_size:
                plan.append((n, perm))
            else:
                plan.extend(
                    (n, perm[i : i + batch_size])
                    for i in range(0, rows - batch_size + 1, batch_size)
                )
        order = rng.permutation(len(plan))
        plan = [plan[i] for i in order]
        while len(plan) < world:  # tiny windows: every rank still gets a batch
            plan = plan + plan
        yield from plan[rank::world]
        epoch += 1


class BackgroundLoader:
    """Threads turning the batch plan into ready :class:`Batch` objects ahead of the trainer.

    ``get()`` blocks until a batch is ready and adds the time blocked to ``wait_s``; the
    trainer reports ``wait_s`` over its step time as the data-wait share. numpy's unpackbits
    and torch's gather release the GIL for most of their work, so the threads overlap the
    training step.
    """

    def __init__(
        self,
        window: Window,
        batch_size: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world: int = 1,
        symmetries: bool = True,
        prefetch: int = 8,
        threads: int = 1,
        pin_memory: bool = False,
    ) -> None:
        self._plan = batch_plan(window, batch_size, seed, rank, world)
        self._plan_lock = threading.Lock()
        self._window = window
        self._queue: queue.Queue[object] = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._symmetries = symmetries
        self._pin = pin_memory
        self.wait_s = 0.0
        self.batches = 0
        self._threads = [
            threading.Thread(
                target=self._work, args=(seed, rank, i), daemon=True, name=f"kgrpc-loader-{i}"
            )
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def _work(self, seed: int, rank: int, thread: int) -> None:
        rng = np.random.default_rng([seed, rank, thread, 0x5EED])
        try:
            while not self._stop.is_set():
                with self._plan_lock:
                    n, idx = next(self._plan)
                batch = make_batch(
                    self._window.by_size[n], idx, rng if self._symmetries else None, self._pin
                )
                self._put(batch)
        except BaseException as exc:  # handed to the trainer, which re-raises it
            self._put(exc)

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def get(self) -> Batch:
        t0 = time.perf_counter()
        item = self._queue.get()
        self.wait_s += time.perf_counter() - t0
        if isinstance(item, BaseException):
            raise RuntimeError(f"data loader failed: {item!r}") from item
        self.batches += 1
        assert isinstance(item, Batch)
        return item

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> BackgroundLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
