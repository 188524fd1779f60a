"""Which stones are dead at the end of a game, and the score once they are removed.

A game between engines ends when both pass, and the board may still hold stones that cannot
live (an invasion that failed, stones left inside the opponent's territory). Counting them
as alive gives wrong scores and sometimes the wrong winner, so a finished position is judged
here, in three steps, each chain (a connected group of one colour) as a whole:

1. **Pass-alive chains** (Benson's algorithm): chains that cannot be captured even if their
   owner never plays again. They are alive, whatever the rest says.
2. **Seki**: an empty point next to both colours that neither side can fill without putting
   its own chain in atari (and without capturing) is a shared liberty of a seki; the chains
   next to it are alive in seki and never dead.
3. **Monte Carlo playouts** for the other chains: from the position (each colour moving first
   in half of them) both sides play uniformly random legal moves that do not fill their own
   single-point eyes and do not fill shared seki liberties, until neither can move; each point
   is then owned by one colour or neither. A chain whose points the opponent owns in more
   playouts than its own colour (mean ownership from the chain's side below zero) is dead.

The seed is fixed, so one position always gets one answer. The area score then counts the
remaining stones and the empty regions that touch only one colour
(:meth:`kgrpc.go.board.Board.score` with the dead stones removed).

Used by ``kgrpc-gtp`` (``final_status_list``, ``final_score``, ``kgs-genmove_cleanup``) and by
the match referee of ``kgrpc-eval`` when GNU Go is not installed.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kgrpc.go.board import BLACK, WHITE, Board, IllegalMoveError
from kgrpc.sgf import result_string

DEFAULT_PLAYOUTS = 64
DEFAULT_SEED = 20240


@dataclass(frozen=True)
class StoneStatus:
    """Every stone of a position sorted into one of three lists of point indices."""

    alive: tuple[int, ...]
    dead: tuple[int, ...]
    seki: tuple[int, ...]


def chains(board: Board) -> list[list[int]]:
    """The chains of the position, each a sorted list of points."""
    seen: set[int] = set()
    out = []
    stones = board.stones
    for p in range(board.num_points):
        if stones[p] and p not in seen:
            members = sorted(board.group_stones(p))
            seen.update(members)
            out.append(members)
    return out


@functools.cache
def neighbours(size: int) -> list[list[int]]:
    """The on-board neighbours of each point of a ``size`` x ``size`` board."""
    nb = []
    for p in range(size * size):
        r, c = divmod(p, size)
        nb.append(
            [
                q
                for q, ok in (
                    (p - size, r > 0),
                    (p + size, r < size - 1),
                    (p - 1, c > 0),
                    (p + 1, c < size - 1),
                )
                if ok
            ]
        )
    return nb


def pass_alive(board: Board, colour: int) -> set[int]:
    """Stones of ``colour`` in chains that are unconditionally alive (Benson's algorithm)."""
    stones = board.stones
    nb = neighbours(board.size)
    chain_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    libs: dict[int, set[int]] = {}
    for chain in chains(board):
        if stones[chain[0]] != colour:
            continue
        cid = chain[0]
        members[cid] = chain
        libs[cid] = set()
        for p in chain:
            chain_of[p] = cid
            libs[cid].update(q for q in nb[p] if stones[q] == 0)
    # Regions: maximal connected sets of points that are not stones of `colour`.
    region_of = [-1] * board.num_points
    regions: list[tuple[list[int], set[int]]] = []  # (points, bordering chains)
    for start in range(board.num_points):
        if stones[start] == colour or region_of[start] >= 0:
            continue
        rid = len(regions)
        pts, border, stack = [], set(), [start]
        region_of[start] = rid
        while stack:
            p = stack.pop()
            pts.append(p)
            for q in nb[p]:
                if stones[q] == colour:
                    border.add(chain_of[q])
                elif region_of[q] < 0:
                    region_of[q] = rid
                    stack.append(q)
        regions.append((pts, border))
    # vital[r] = chains for which every empty point of region r is a liberty.
    vital: list[set[int]] = []
    for pts, border in regions:
        empties = [p for p in pts if stones[p] == 0]
        vital.append({c for c in border if all(e in libs[c] for e in empties)})
    alive = set(members)
    live_regions = set(range(len(regions)))
    changed = True
    while changed:
        changed = False
        for c in list(alive):
            healthy = sum(1 for r in live_regions if c in vital[r])
            if healthy < 2:
                alive.discard(c)
                changed = True
        for r in list(live_regions):
            if not regions[r][1] <= alive:
                live_regions.discard(r)
                changed = True
    return {p for c in alive for p in members[c]}


def seki_liberties(board: Board) -> set[int]:
    """Empty points next to both colours that neither may fill without self-atari."""
    stones = board.stones
    nb = neighbours(board.size)
    out = set()
    for p in range(board.num_points):
        if stones[p]:
            continue
        colours = {int(stones[q]) for q in nb[p]} - {0}
        if colours != {BLACK, WHITE}:
            continue
        if all(_self_atari(board, p, c) for c in (BLACK, WHITE)):
            out.add(p)
    return out


def _self_atari(board: Board, p: int, colour: int) -> bool:
    """Would ``colour`` playing ``p`` be illegal, or leave its chain with one liberty without
    capturing anything?"""
    trial = board.copy()
    trial.max_moves = None
    trial.consecutive_passes = 0
    trial.set_to_play(colour)
    before = trial.captures[colour]
    try:
        trial.play(p)
    except IllegalMoveError:
        return True
    if trial.captures[colour] != before:
        return False
    return trial.stones[p] == 0 or trial.group_liberties(p) <= 1


def _playout(board: Board, rng: random.Random, forbidden: set[int], limit: int) -> None:
    """Random non-eye-filling moves (never on ``forbidden``) until neither side can move."""
    stones = board.stones
    empties = [p for p in range(board.num_points) if not stones[p] and p not in forbidden]
    pass_move = board.pass_move
    passes = 0
    for _ in range(limit):
        me = board.to_play
        # Draw candidates uniformly without replacement; rejected ones are swapped out.
        k, i = -1, len(empties)
        while i:
            j = int(rng.random() * i)
            p = empties[j]
            if not board.is_own_eye(p, me) and board.is_legal(p):
                k = j
                break
            i -= 1
            empties[j], empties[i] = empties[i], empties[j]
        if k < 0:
            passes += 1
            if passes == 2:
                return
            board.consecutive_passes = 0  # the copy must stay playable: it is not the game
            board.play(pass_move)
            continue
        passes = 0
        captured = board.captures[BLACK] + board.captures[WHITE]
        move = empties[k]
        empties[k] = empties[-1]
        empties.pop()
        board.play(move)
        if board.captures[BLACK] + board.captures[WHITE] != captured:
            stones = board.stones
            empties = [p for p in range(board.num_points) if not stones[p] and p not in forbidden]


def ownership_estimate(
    board: Board,
    playouts: int = DEFAULT_PLAYOUTS,
    seed: int = DEFAULT_SEED,
    forbidden: Iterable[int] = (),
) -> np.ndarray:
    """Mean final area ownership over random playouts, float [N*N] in [-1, 1], +1 = black."""
    if playouts < 1:
        raise ValueError(f"playouts must be >= 1, got {playouts}")
    rng = random.Random(seed)
    blocked = set(forbidden)
    total = np.zeros(board.num_points, dtype=np.float64)
    limit = 4 * board.num_points + 16
    for i in range(playouts):
        trial = board.copy()
        trial.max_moves = None
        trial.consecutive_passes = 0
        # Half the playouts with each colour moving first: the judgement must not hinge on
        # whose turn it happened to be when the game stopped.
        trial.set_to_play(BLACK if i % 2 == 0 else WHITE)
        _playout(trial, rng, blocked, limit)
        total += trial.area_ownership()
    return total / playouts


def stone_status(
    board: Board, playouts: int = DEFAULT_PLAYOUTS, seed: int = DEFAULT_SEED
) -> StoneStatus:
    """Sort every stone into alive, dead or seki (see the module docstring)."""
    stones = board.stones
    if not stones.any():
        return StoneStatus((), (), ())
    safe = pass_alive(board, BLACK) | pass_alive(board, WHITE)
    shared = seki_liberties(board)
    nb = neighbours(board.size)
    in_seki = set()
    for chain in chains(board):
        if any(q in shared for p in chain for q in nb[p]):
            in_seki.update(chain)
    undecided = [c for c in chains(board) if c[0] not in safe and c[0] not in in_seki]
    dead: set[int] = set()
    if undecided:
        own = ownership_estimate(board, playouts, seed, forbidden=shared)
        for chain in undecided:
            colour = int(stones[chain[0]])
            if float(own[chain].mean()) * colour < 0:
                dead.update(chain)
    alive = [p for p in range(board.num_points) if stones[p] and p not in dead and p not in in_seki]
    return StoneStatus(tuple(alive), tuple(sorted(dead)), tuple(sorted(in_seki)))


def score_without(board: Board, dead: Sequence[int]) -> float:
    """Black minus white minus komi once ``dead`` are removed (the board's scoring rule)."""
    return board.score(list(dead))


def result_text(score: float) -> str:
    """GTP ``final_score`` / SGF ``RE`` form of a black-minus-white score: B+3.5, W+0.5, 0."""
    winner = BLACK if score > 0 else WHITE if score < 0 else 0
    return result_string(winner, score, resigned=False)
