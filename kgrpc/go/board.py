"""The Go board: its state, legal moves, captures, ko and superko, passes; ``Board`` itself.

Conventions (docs/formats.md): a board of size N has N*N points, point index ``row * N + col``
(row 0 = top), index ``N*N`` = pass. Colours are ``BLACK = 1``, ``WHITE = -1``, ``EMPTY = 0``
(:mod:`kgrpc.go.geometry`, with the per-size tables; ``BLACK`` and ``WHITE`` import from here
too). The rest of the Python board's methods live by job in mixins: position setup
(:mod:`kgrpc.go.position_setup`), ownership and score (:mod:`kgrpc.go.counting`), the
consistency check and text diagram (:mod:`kgrpc.go.board_debug`).

Internal representation, chosen for speed in pure Python:

* ``_stones`` is a ``bytearray`` holding each point's colour as an unsigned byte (black 1,
  white 255 = -1 as int8), so ``np.frombuffer(_stones, np.int8)`` is the signed view for free.
* Groups are tracked incrementally: ``_gid[p]`` (an ``array('H')``) is the id of the group at p
  (the id is one of its stones; ``N*N`` for an empty point), ``_glibs[id]`` its liberty set and
  ``_gstones[id]`` its stone list. A move touches only its neighbours' groups; no board scans.
* Zobrist hashing of the stones (``_hash``) gives positional and situational superko; the
  history of hashes is only kept when the rules need it.
"""

from __future__ import annotations

from array import array
from operator import index as _as_int

import numpy as np

from kgrpc.go.board_debug import BoardDebug
from kgrpc.go.coords import to_gtp
from kgrpc.go.counting import BoardCounting
from kgrpc.go.geometry import _B, _W, BLACK, WHITE, _geometry, _signed
from kgrpc.go.position_setup import BoardSetup
from kgrpc.go.rules import CHINESE, Rules

_OFF = 7  # sentinel for off-board neighbours in the vectorised legal mask


class IllegalMoveError(ValueError):
    """A move that the rules forbid; the message says why."""


class Board(BoardSetup, BoardCounting, BoardDebug):
    """A Go position plus its history. Mutated in place by :meth:`play`; :meth:`copy` is cheap."""

    __slots__ = (
        "size",
        "rules",
        "komi",
        "num_points",
        "pass_move",
        "max_moves",
        "moves",
        "consecutive_passes",
        "captures",
        "ko_point",
        "_geo",
        "_nb",
        "_stones",
        "_gid",
        "_glibs",
        "_gstones",
        "_tp",
        "_hash",
        "_seen",
    )

    def __init__(
        self,
        size: int,
        rules: Rules = CHINESE,
        komi: float = 7.5,
        *,
        max_moves: int | None = None,
    ) -> None:
        size = _as_int(size)
        if not 2 <= size <= 19:
            raise ValueError(f"board size {size} out of range 2..19")
        if not isinstance(rules, Rules):
            raise TypeError(f"rules must be a Rules, not {type(rules).__name__}")
        komi = float(komi)
        if komi != komi or abs(komi) > 1000:
            raise ValueError(f"komi {komi} is not a sensible number")
        geo = _geometry(size)
        self.size = size
        self.rules = rules
        self.komi = komi
        self.num_points = geo.nn
        self.pass_move = geo.nn
        self.max_moves = max_moves
        self.moves: list[int] = []
        self.consecutive_passes = 0
        self.captures: dict[int, int] = {BLACK: 0, WHITE: 0}
        self.ko_point = -1
        self._geo = geo
        self._nb = geo.nb
        self._stones = bytearray(geo.nn)
        self._gid = array("H", [geo.nn]) * geo.nn
        self._glibs: dict[int, set[int]] = {}
        self._gstones: dict[int, list[int]] = {}
        self._tp = _B
        self._hash = 0
        self._seen: set[int] | None = None
        if rules.superko:
            self._seen = {self._history_key(0, _B)}

    # ----------------------------------------------------------------- read-only views
    @property
    def to_play(self) -> int:
        return BLACK if self._tp == _B else WHITE

    @property
    def stones(self) -> np.ndarray:
        """int8 [N*N]: +1 black, -1 white, 0 empty (a copy)."""
        return np.frombuffer(self._stones, dtype=np.int8).copy()

    @property
    def move_number(self) -> int:
        return len(self.moves)

    def is_over(self) -> bool:
        return self.consecutive_passes >= 2 or (
            self.max_moves is not None and len(self.moves) >= self.max_moves
        )

    def position_hash(self) -> int:
        """Zobrist hash of the stones and the player to move."""
        return self._hash ^ (self._geo.z_white_to_play if self._tp == _W else 0)

    def group_liberties(self, point: int) -> int:
        point = _as_int(point)
        if not 0 <= point < self.num_points or not self._stones[point]:
            raise ValueError(f"no stone at point {point}")
        return len(self._glibs[self._gid[point]])

    def group_stones(self, point: int) -> list[int]:
        point = _as_int(point)
        if not 0 <= point < self.num_points or not self._stones[point]:
            raise ValueError(f"no stone at point {point}")
        return list(self._gstones[self._gid[point]])

    # ----------------------------------------------------------------- copying
    def copy(self) -> Board:
        b = PyBoard.__new__(PyBoard)
        b.size = self.size
        b.rules = self.rules
        b.komi = self.komi
        b.num_points = self.num_points
        b.pass_move = self.pass_move
        b.max_moves = self.max_moves
        b.moves = self.moves[:]
        b.consecutive_passes = self.consecutive_passes
        b.captures = dict(self.captures)
        b.ko_point = self.ko_point
        b._geo = self._geo
        b._nb = self._nb
        b._stones = self._stones[:]
        b._gid = self._gid[:]
        b._glibs = {k: v.copy() for k, v in self._glibs.items()}
        b._gstones = {k: v[:] for k, v in self._gstones.items()}
        b._tp = self._tp
        b._hash = self._hash
        b._seen = None if self._seen is None else set(self._seen)
        return b

    __copy__ = copy

    # ----------------------------------------------------------------- legality
    def _history_key(self, stone_hash: int, to_play_code: int) -> int:
        if self.rules.ko == "situational" and to_play_code == _W:
            return stone_hash ^ self._geo.z_white_to_play
        return stone_hash

    def _illegal_reason(self, p: int) -> str | None:
        """Why the player to move may not play on-board point p, or None if the move is legal."""
        stones = self._stones
        if stones[p]:
            return "occupied"
        if p == self.ko_point:
            return "ko"
        c = self._tp
        gid = self._gid
        glibs = self._glibs
        suicide = True
        for q in self._nb[p]:
            s = stones[q]
            if s == 0:
                suicide = False
            elif s == c:
                if len(glibs[gid[q]]) > 1:
                    suicide = False
            elif len(glibs[gid[q]]) == 1:
                suicide = False
        if suicide and not self.rules.suicide:
            return "suicide"
        if self._seen is not None and self._resulting_key(p, suicide) in self._seen:
            return "superko"
        return None

    def _resulting_key(self, p: int, suicide: bool) -> int:
        """History key of the position after the mover plays p (p known empty and not ko)."""
        c = self._tp
        o = 256 - c
        z = self._geo.zobrist
        stones = self._stones
        gid = self._gid
        glibs = self._glibs
        h = self._hash
        if suicide:
            zc = z[c]
            roots = {gid[q] for q in self._nb[p] if stones[q] == c}
            for r in roots:
                for s in self._gstones[r]:
                    h ^= zc[s]
        else:
            h ^= z[c][p]
            zo = z[o]
            roots = {gid[q] for q in self._nb[p] if stones[q] == o and len(glibs[gid[q]]) == 1}
            for r in roots:
                for s in self._gstones[r]:
                    h ^= zo[s]
        return self._history_key(h, o)

    def is_legal(self, move: int) -> bool:
        move = _as_int(move)
        if self.is_over():
            return False
        if move == self.num_points:
            return True
        if not 0 <= move < self.num_points:
            return False
        return self._illegal_reason(move) is None

    def legal_mask(self) -> np.ndarray:
        """bool [N*N+1]: the moves the player to move may make (pass always, unless game over)."""
        nn = self.num_points
        mask = np.zeros(nn + 1, dtype=bool)
        if self.is_over():
            return mask
        ext = np.empty(nn + 1, dtype=np.uint8)
        ext[:nn] = np.frombuffer(self._stones, dtype=np.uint8)
        ext[nn] = _OFF
        empty = ext[:nn] == 0
        # An empty point next to an empty point is legal except for ko/superko; only the
        # others (surrounded points) need the group-level test.
        has_lib = (ext[self._geo.nbr_np] == 0).any(axis=1)
        mask[:nn] = empty & has_lib
        if self._seen is not None:
            for p in np.flatnonzero(empty).tolist():
                mask[p] = self._illegal_reason(p) is None
        else:
            for p in np.flatnonzero(empty & ~has_lib).tolist():
                mask[p] = self._illegal_reason(p) is None
            if self.ko_point >= 0:
                mask[self.ko_point] = False
        mask[nn] = True
        return mask

    def legal_moves(self) -> list[int]:
        return np.flatnonzero(self.legal_mask()).tolist()

    def ko_banned(self) -> list[int]:
        """Empty points the player to move may not play because of ko or superko."""
        if self._seen is None:
            return [self.ko_point] if self.ko_point >= 0 else []
        banned = []
        for p in range(self.num_points):
            if not self._stones[p] and self._illegal_reason(p) in ("ko", "superko"):
                banned.append(p)
        return banned

    def is_own_eye(self, move: int, color: int) -> bool:
        """True if ``move`` is a single-point eye of ``color`` (filling it would be a waste)."""
        move = _as_int(move)
        if not 0 <= move < self.num_points:
            return False
        return self._is_eye(move, _B if color == BLACK else _W)

    def _is_eye(self, p: int, c: int) -> bool:
        stones = self._stones
        if stones[p]:
            return False
        for q in self._nb[p]:
            if stones[q] != c:
                return False
        o = 256 - c
        bad = 0
        for q in self._geo.diag[p]:
            if stones[q] == o:
                bad += 1
        return bad < self._geo.eye_limit[p]

    # ----------------------------------------------------------------- moves
    def play(self, move: int) -> None:
        """Play ``move`` for the player to move; raises IllegalMoveError (and changes nothing)."""
        move = _as_int(move)
        nn = self.num_points
        if self.is_over():
            why = "two consecutive passes" if self.consecutive_passes >= 2 else "move cap reached"
            raise IllegalMoveError(f"game over ({why})")
        if move == nn:
            self._pass()
            return
        if not 0 <= move < nn:
            raise IllegalMoveError(f"move {move} is off a {self.size}x{self.size} board")
        reason = self._illegal_reason(move)
        if reason is not None:
            raise IllegalMoveError(f"{to_gtp(move, self.size)} is illegal: {reason}")
        self._place(move)

    def _pass(self) -> None:
        self.moves.append(self.num_points)
        self.consecutive_passes += 1
        self.ko_point = -1
        self._tp = 256 - self._tp
        if self._seen is not None:
            self._seen.add(self._history_key(self._hash, self._tp))

    def _place(self, p: int) -> list[int]:
        """Put a stone of the player to move on p (legality already checked).

        Returns the points that became empty (captured stones, or the mover's own stones after
        a suicide), which random playouts use to keep their list of empty points.
        """
        c = self._tp
        o = 256 - c
        stones = self._stones
        gid = self._gid
        glibs = self._glibs
        gstones = self._gstones
        nb = self._nb
        nn = self.num_points
        z = self._geo.zobrist
        stones[p] = c
        h = self._hash ^ z[c][p]
        libs = set()
        friends: list[int] = []
        dead: list[int] = []
        for q in nb[p]:
            s = stones[q]
            if s == 0:
                libs.add(q)
            elif s == c:
                r = gid[q]
                if r not in friends:
                    friends.append(r)
            else:
                r = gid[q]
                lq = glibs[r]
                lq.discard(p)
                if not lq and r not in dead:
                    dead.append(r)
        if not friends:
            root = p
            gid[p] = p
            glibs[p] = libs
            gstones[p] = [p]
            mystones = gstones[p]
        else:
            if len(friends) > 1:
                # Relabel the smaller groups into the largest one.
                friends.sort(key=lambda r: len(gstones[r]), reverse=True)
            root = friends[0]
            mylibs = glibs[root]
            mystones = gstones[root]
            for r in friends[1:]:
                other = gstones.pop(r)
                for s in other:
                    gid[s] = root
                mystones.extend(other)
                mylibs |= glibs.pop(r)
            mylibs |= libs
            mylibs.discard(p)
            gid[p] = root
            mystones.append(p)
        freed: list[int] = []
        self.ko_point = -1
        if dead:
            zo = z[o]
            for r in dead:
                del glibs[r]
                for s in gstones.pop(r):
                    stones[s] = 0
                    gid[s] = nn
                    h ^= zo[s]
                    freed.append(s)
            for s in freed:
                for q in nb[s]:
                    if stones[q] == c:
                        glibs[gid[q]].add(s)
            self.captures[_signed(c)] += len(freed)
            if len(freed) == 1 and len(mystones) == 1 and len(glibs[root]) == 1:
                self.ko_point = freed[0]
        elif not glibs[root]:
            # Suicide (only reached when the rules allow it): the mover's group comes off.
            zc = z[c]
            del glibs[root]
            for s in gstones.pop(root):
                stones[s] = 0
                gid[s] = nn
                h ^= zc[s]
                freed.append(s)
            for s in freed:
                for q in nb[s]:
                    if stones[q] == o:
                        glibs[gid[q]].add(s)
            self.captures[_signed(o)] += len(freed)
        self._hash = h
        self.moves.append(p)
        self.consecutive_passes = 0
        self._tp = o
        if self._seen is not None:
            self._seen.add(self._history_key(h, o))
        return freed


# The pure-Python board stays the reference (tests compare against it) and the fallback; with
# the native core installed (kgrpc/native.py) ``Board`` is its C++ board: same API, same answers.
PyBoard = Board
NativeBoard: type | None = None
from kgrpc import native as _native  # noqa: E402  (after the reference class on purpose)

if _native.ENABLED:
    NativeBoard = _native.ext.Board
    Board = NativeBoard  # type: ignore[misc,assignment]
