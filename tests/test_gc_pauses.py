"""Full garbage collections wait for many young ones (kgrpc.gc_pauses): the coordinator's
full collections over a large fleet's objects stopped every thread for up to a second."""

from __future__ import annotations

import gc

from kgrpc.gc_pauses import FULL_AFTER, fewer_full_collections


def full_collections_while_growing(rounds: int = 60) -> int:
    """Full collections run while long-lived objects grow by ``rounds`` generation-1
    collections' worth (the growth CPython's own rule waits for, so only the threshold
    decides)."""
    before = gc.get_stats()[2]["collections"]
    young, middle, _ = gc.get_threshold()
    kept = [[[] for _ in range(young * middle)] for _ in range(rounds)]
    after = gc.get_stats()[2]["collections"]
    del kept
    return after - before


def test_full_collections_wait_for_many_young_ones() -> None:
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # CPython's defaults
        assert full_collections_while_growing() >= 2
        fewer_full_collections()
        assert gc.get_threshold() == (700, 10, FULL_AFTER)  # the young ones as they were
        assert full_collections_while_growing() == 0
    finally:
        gc.set_threshold(*saved)
