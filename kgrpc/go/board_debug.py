"""Checking and printing a board: the incremental groups recomputed, a text diagram.

:class:`BoardDebug` holds these methods of the Python board (:class:`kgrpc.go.board.PyBoard`, a
mixin over its state): :meth:`~BoardDebug.check_invariants`, which the tests call after moves to
compare the incremental group records with groups found from scratch, and ``str(board)``.
"""

from __future__ import annotations

from kgrpc.go.geometry import _B, _W


class BoardDebug:
    """Consistency check and text picture of a :class:`~kgrpc.go.board.PyBoard`."""

    __slots__ = ()

    def check_invariants(self) -> None:
        """Recompute the groups from scratch and compare with the incremental state (tests)."""
        nn = self.num_points
        seen = [False] * nn
        groups = 0
        for p in range(nn):
            c = self._stones[p]
            if not c:
                assert self._gid[p] == nn, f"empty point {p} has group id {self._gid[p]}"
                continue
            if seen[p]:
                continue
            stack, members, libs = [p], [], set()
            seen[p] = True
            while stack:
                x = stack.pop()
                members.append(x)
                for q in self._nb[x]:
                    if self._stones[q] == 0:
                        libs.add(q)
                    elif self._stones[q] == c and not seen[q]:
                        seen[q] = True
                        stack.append(q)
            root = self._gid[p]
            assert all(self._gid[m] == root for m in members), f"group at {p} has mixed ids"
            assert sorted(self._gstones[root]) == sorted(members), f"stones of group {root}"
            assert self._glibs[root] == libs, f"liberties of group {root}"
            assert libs, f"group {root} has no liberties"
            groups += 1
        assert groups == len(self._glibs) == len(self._gstones), "stale group records"

    def __str__(self) -> str:
        from kgrpc.go.coords import GTP_COLUMNS

        n = self.size
        letters = " ".join(GTP_COLUMNS[:n])
        lines = [f"   {letters}"]
        for r in range(n):
            row = " ".join(".XO"[{0: 0, _B: 1, _W: 2}[s]] for s in self._stones[r * n : r * n + n])
            lines.append(f"{n - r:2d} {row} {n - r}")
        lines.append(f"   {letters}")
        return "\n".join(lines)
