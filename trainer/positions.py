"""Positions for int8 calibration and export parity: from recent training rows, else random games.

A :class:`Positions` set holds the net's inputs for one board size (float32 planes
[B, NUM_PLANES, N, N] and globals [B, NUM_GLOBALS]). Sources, best first:

- the trainer's :class:`trainer.data.Window` (the rows it trains on; the newest rows are drawn);
- a shard directory (``DATA_DIR/training_data/<run>/games_*.npz``, newest shards first);
- legal random games played by the rules engine (``kgrpc.go``): positions of the right shape
  and plausible statistics, for a model with no data yet (``kgrpc-train init``).

:func:`draw_sets` returns two *disjoint* draws: one to calibrate int8 activations, one held out
to measure parity, so a quantised model is never judged on the positions it was tuned on.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kgrpc.schema import NUM_PLANES
from trainer.batches import make_batch
from trainer.data import (
    ShardError,
    ShardIndex,
    SizeArrays,
    Window,
    load_shard_rows,
)

MIN_PER_SIZE = 8


@dataclass(frozen=True)
class Positions:
    board_size: int
    planes: np.ndarray  # float32 [B, NUM_PLANES, N, N]
    globals: np.ndarray  # float32 [B, NUM_GLOBALS]
    source: str  # "window", "shards" or "random games"

    def __len__(self) -> int:
        return int(self.planes.shape[0])

    def take(self, idx: np.ndarray) -> Positions:
        return Positions(self.board_size, self.planes[idx], self.globals[idx], self.source)


def _per_size(count: int, sizes: Sequence[int]) -> int:
    return max(MIN_PER_SIZE, count // max(1, len(sizes)))


def _from_arrays(arrs: SizeArrays, count: int, rng: np.random.Generator, source: str) -> Positions:
    """``count`` rows drawn from the newest ``4 * count`` rows of ``arrs`` (rows are in
    shard order, oldest first), unpacked, without symmetries."""
    newest = min(arrs.rows, 4 * count)
    idx = arrs.rows - newest + rng.choice(newest, size=min(count, newest), replace=False)
    batch = make_batch(arrs, idx, None)
    return Positions(arrs.size, batch.planes.numpy(), batch.globals.numpy(), source)


def from_window(
    window: Window, count: int, seed: int = 0, sizes: Iterable[int] | None = None
) -> list[Positions]:
    """About ``count`` positions split over ``sizes`` (default: the window's board sizes);
    sizes the window lacks are left out."""
    rng = np.random.default_rng(seed)
    sizes = sorted(set(window.by_size if sizes is None else sizes) & set(window.by_size))
    each = _per_size(count, sizes)
    return [_from_arrays(window.by_size[n], each, rng, "window") for n in sizes]


def from_shards(
    data_dir: str | os.PathLike[str],
    count: int,
    sizes: Iterable[int],
    seed: int = 0,
    runs: Iterable[str] = (),
) -> list[Positions]:
    """Positions of each of ``sizes`` from the newest readable shards under ``data_dir``;
    sizes with no rows there are left out (the caller fills them from random games)."""
    wanted = sorted(set(sizes))
    each = _per_size(count, wanted)
    rows: dict[int, list[dict[str, np.ndarray]]] = {n: [] for n in wanted}
    have = dict.fromkeys(wanted, 0)
    for shard in reversed(ShardIndex(data_dir, runs).refresh()):
        if shard.board_size not in rows or have[shard.board_size] >= 4 * each:
            continue
        try:
            arrs, _, _, n = load_shard_rows(shard.path)
        except ShardError:
            continue  # logged by the trainer when it meets the file; here it is just skipped
        rows[n].insert(0, arrs)  # keep oldest-first order
        have[n] += int(arrs["value"].shape[0])
        if all(have[k] >= 4 * each for k in wanted):
            break
    rng = np.random.default_rng(seed)
    out = []
    for n in wanted:
        if not rows[n]:
            continue
        cat = {k: np.concatenate([r[k] for r in rows[n]]) for k in rows[n][0]}
        out.append(_from_arrays(SizeArrays(n, **cat), each, rng, "shards"))
    return out


def from_random_games(board_size: int, count: int, seed: int = 0) -> Positions:
    """``count`` positions from legal random games (several per game, at random depths)."""
    from kgrpc.randgame import random_positions

    planes, globals_ = random_positions(board_size, count, seed)
    return Positions(board_size, planes, globals_, "random games")


def complete(
    sets: list[Positions], sizes: Iterable[int], count: int, seed: int = 0
) -> list[Positions]:
    """``sets`` plus random-game positions for each of ``sizes`` that has none."""
    wanted = sorted(set(sizes))
    have = {p.board_size for p in sets}
    each = _per_size(count, wanted)
    extra = [from_random_games(n, each, seed + n) for n in wanted if n not in have]
    return sorted([*sets, *extra], key=lambda p: p.board_size)


def with_random_games(sets: Sequence[Positions], share: float, seed: int = 0) -> list[Positions]:
    """``sets`` plus, for each, ``share`` as many positions of legal random games of its board
    size (at least one): int8 calibration covering inputs a run's own games never show."""
    extra = [
        from_random_games(p.board_size, max(1, round(share * len(p))), seed + p.board_size)
        for p in sets
    ]
    return [*sets, *extra]


def split(sets: Sequence[Positions], seed: int = 0) -> tuple[list[Positions], list[Positions]]:
    """(calibration, held-out): each set cut in two disjoint random halves."""
    rng = np.random.default_rng(seed)
    calib, held = [], []
    for p in sets:
        perm = rng.permutation(len(p))
        half = len(p) // 2
        calib.append(p.take(np.sort(perm[:half])))
        held.append(p.take(np.sort(perm[half:])))
    return calib, held


def draw_sets(
    sizes: Iterable[int],
    count: int,
    *,
    window: Window | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    runs: Iterable[str] = (),
    seed: int = 0,
) -> tuple[list[Positions], list[Positions]]:
    """(calibration, held-out) sets of about ``count`` positions each over ``sizes``."""
    sizes = sorted(set(sizes))
    found: list[Positions] = []
    if window is not None and window.rows:
        found = from_window(window, 2 * count, seed, sizes)
    elif data_dir and Path(data_dir).is_dir():
        found = from_shards(data_dir, 2 * count, sizes, seed, runs)
    sets = complete(found, sizes, 2 * count, seed)
    for p in sets:
        assert p.planes.shape[1:] == (NUM_PLANES, p.board_size, p.board_size), p.planes.shape
    return split(sets, seed)


def describe(sets: Sequence[Positions]) -> str:
    """``"128 at 9x9 (window), 128 at 19x19 (random games)"``."""
    return ", ".join(f"{len(p)} at {p.board_size}x{p.board_size} ({p.source})" for p in sets)
