"""Setting up a position without moves: stones placed at once, the player to move changed.

:class:`BoardSetup` holds these methods of the Python board (:class:`kgrpc.go.board.PyBoard`, a
mixin over its state): SGF AB/AW and handicap stones (:meth:`~BoardSetup.set_stones`, which
rebuilds the groups from scratch) and GTP out-of-turn play or SGF PL
(:meth:`~BoardSetup.set_to_play`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from operator import index as _as_int

from kgrpc.go.coords import to_gtp
from kgrpc.go.geometry import _B, _W, BLACK


class BoardSetup:
    """Position setup of a :class:`~kgrpc.go.board.PyBoard`."""

    __slots__ = ()

    def set_stones(
        self, black: Iterable[int] = (), white: Iterable[int] = (), to_play: int = BLACK
    ) -> None:
        """Set up a position (SGF AB/AW, handicap, tests): replaces the stones, keeps moves.

        Raises ValueError if a point is off the board or named twice, or if a group would
        have no liberty. Ko state is cleared; superko history restarts from this position.
        """
        nn = self.num_points
        stones = bytearray(nn)
        for code, points in ((_B, black), (_W, white)):
            for p in points:
                p = _as_int(p)
                if not 0 <= p < nn:
                    raise ValueError(f"setup point {p} is off a {self.size}x{self.size} board")
                if stones[p]:
                    raise ValueError(f"setup point {to_gtp(p, self.size)} named twice")
                stones[p] = code
        self._stones = stones
        self._gid = array("H", [nn]) * nn
        self._glibs = {}
        self._gstones = {}
        self._hash = 0
        z = self._geo.zobrist
        for p in range(nn):
            c = stones[p]
            if not c:
                continue
            self._hash ^= z[c][p]
            if self._gid[p] != nn:
                continue
            members, libs, stack = [], set(), [p]
            self._gid[p] = p
            while stack:
                x = stack.pop()
                members.append(x)
                for q in self._nb[x]:
                    if stones[q] == 0:
                        libs.add(q)
                    elif stones[q] == c and self._gid[q] == nn:
                        self._gid[q] = p
                        stack.append(q)
            if not libs:
                raise ValueError(
                    f"setup leaves the group at {to_gtp(p, self.size)} without liberties"
                )
            self._glibs[p] = libs
            self._gstones[p] = members
        self._tp = _B if to_play == BLACK else _W
        self.ko_point = -1
        self.consecutive_passes = 0
        if self._seen is not None:
            self._seen = {self._history_key(self._hash, self._tp)}

    def set_to_play(self, color: int) -> None:
        """Make ``color`` the player to move without a move (GTP out-of-turn play, SGF PL).

        Not recorded in ``moves``; clears the ko point (a ko ban is only for the next player).
        """
        code = _B if color == BLACK else _W
        if code != self._tp:
            self._tp = code
            self.ko_point = -1
