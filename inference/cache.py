"""Evaluation cache: LRU map from a position key to its network outputs.

Key = blake2b-128 of (length-prefixed model name, board size, packed plane row bytes, globals row
bytes), so
identical positions (transpositions, repeated openings across games) skip the network. The
value is one position's (policy probs, value, score, ownership) float32 arrays. A capacity of 0
disables the cache. Not thread-safe: used from the event loop only.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

Entry = tuple[np.ndarray, float, float, np.ndarray]


class EvalCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self._map: OrderedDict[bytes, Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def __len__(self) -> int:
        return len(self._map)

    @staticmethod
    def key(model: str, board_size: int, packed_row: np.ndarray, globals_row: np.ndarray) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        name = model.encode()
        # Length-prefixed: back to back, a longer name could absorb the size byte and a row
        # prefix of another request and hash the same bytes.
        h.update(len(name).to_bytes(4, "little"))
        h.update(name)
        h.update(board_size.to_bytes(1, "little"))
        h.update(packed_row.tobytes())
        h.update(globals_row.tobytes())
        return h.digest()

    def get(self, key: bytes) -> Entry | None:
        entry = self._map.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._map.move_to_end(key)
        self.hits += 1
        return entry

    def put(self, key: bytes, entry: Entry) -> None:
        if not self.capacity:
            return
        self._map[key] = entry
        self._map.move_to_end(key)
        while len(self._map) > self.capacity:
            self._map.popitem(last=False)
