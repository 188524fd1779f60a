"""Fewer full garbage collections in a process that holds many long-lived objects.

CPython's cyclic collector walks every object it tracks in a full (generation 2)
collection, holding the GIL: every thread of the process stops meanwhile. A coordinator
serving 10,000 volunteers tracks about 655,000 objects (some 65 per open WatchModels
stream: coroutines, contexts, async generators, futures), and a full collection took 0.5 to
1 s on a shared 2-core machine. With CPython's thresholds (700, 10, 10) one ran every 10 s
or so once the fleet was up, although each found almost nothing to free: calls in flight
outlive two young collections and count as new long-lived objects. The simulated fleet of
``kgrpc-bench fleet`` paused the same way, up to 2.6 s (docs/performance.md, issue 26).

The young collections stay as they are (they walk only new objects: milliseconds); a full
one is considered only after :data:`FULL_AFTER` collections of generation 1 instead of 10,
and CPython still runs it only once the long-lived objects grew by a quarter. Reference
counting frees everything else at once; what waits for the next full collection is cyclic
garbage only, for minutes instead of seconds.
"""

from __future__ import annotations

import gc

# Collections of generation 1 before a full one is considered (CPython's default is 10).
FULL_AFTER = 1000


def fewer_full_collections() -> None:
    """Keep the young generations' thresholds, raise the full collection's (:data:`FULL_AFTER`)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_AFTER)
