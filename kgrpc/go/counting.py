"""Counting a finished game: ownership regions and the score under area or territory rules.

:class:`BoardCounting` holds these methods of the Python board (:class:`kgrpc.go.board.PyBoard`,
a mixin over its state): which points each colour owns once the dead stones are removed, and
black's lead minus komi under the board's scoring rule. Which stones are dead is decided
elsewhere (:mod:`kgrpc.programs.eval.scoring`, GNU Go).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import index as _as_int

import numpy as np

from kgrpc.go.geometry import _B, BLACK, WHITE, _signed


class BoardCounting:
    """Ownership and score of a :class:`~kgrpc.go.board.PyBoard`."""

    __slots__ = ()

    def _regions(self, dead: Iterable[int] | None) -> tuple[list[int], int, int, int, int]:
        """Ownership after removing ``dead`` (all other stones alive).

        Returns (ownership list of +1/-1/0, black stones, white stones, black territory,
        white territory), where territory = empty points reached only by one colour.
        """
        nn = self.num_points
        colour = [_signed(s) if s else 0 for s in self._stones]
        if dead is not None:
            for d in dead:
                d = _as_int(d)
                if not 0 <= d < nn or colour[d] == 0:
                    raise ValueError(f"dead stone list names point {d}, which holds no stone")
                colour[d] = 0
        own = colour[:]
        nb = self._nb
        seen = [False] * nn
        terr = {BLACK: 0, WHITE: 0}
        for start in range(nn):
            if colour[start] or seen[start]:
                continue
            region = [start]
            seen[start] = True
            border = 0  # bit 1: touches black, bit 2: touches white
            i = 0
            while i < len(region):
                p = region[i]
                i += 1
                for q in nb[p]:
                    cq = colour[q]
                    if cq == 0:
                        if not seen[q]:
                            seen[q] = True
                            region.append(q)
                    else:
                        border |= 1 if cq == BLACK else 2
            if border == 1 or border == 2:
                owner = BLACK if border == 1 else WHITE
                terr[owner] += len(region)
                for p in region:
                    own[p] = owner
        nb_black = colour.count(BLACK)
        nb_white = colour.count(WHITE)
        return own, nb_black, nb_white, terr[BLACK], terr[WHITE]

    def ownership(self, dead: Iterable[int] | None = None) -> np.ndarray:
        """int8 [N*N] area ownership after removing ``dead``: +1 black, -1 white, 0 neither."""
        return np.array(self._regions(dead)[0], dtype=np.int8)

    def area_ownership(self) -> np.ndarray:
        """int8 [N*N]: stones and single-colour empty regions, every stone counted alive."""
        return self.ownership(None)

    def score(self, dead: Iterable[int] | None = None) -> float:
        """Black minus white minus komi under the board's scoring rule."""
        dead_list = None if dead is None else [_as_int(d) for d in dead]
        _, b, w, tb, tw = self._regions(dead_list)
        if self.rules.scoring == "area":
            return float(b + tb - w - tw - self.komi)
        dead_black = dead_white = 0
        for d in dead_list or ():
            if self._stones[d] == _B:
                dead_black += 1
            else:
                dead_white += 1
        black = tb + self.captures[BLACK] + dead_white
        white = tw + self.captures[WHITE] + dead_black
        return float(black - white - self.komi)
