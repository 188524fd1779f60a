"""Search-tree nodes: per-node numpy arrays over all moves (minigo's layout).

A node stands for a position. Its statistics about each move live in arrays indexed by move
(N*N points + pass), from the point of view of the player to move at the node:
``child_n`` visit counts (plus virtual loss in flight), ``child_w`` summed values,
``child_s`` summed scores, ``prior`` the net's policy (masked to legal moves). Child
:class:`Node` objects exist only for moves that were tried. Selection is one vectorised PUCT
argmax over these arrays, so per-visit Python work stays small.
"""

from __future__ import annotations

import math

import numpy as np

from kgrpc.go.board import Board

_NEG_INF = np.float32(-np.inf)
_TWO_OVER_PI = 2.0 / math.pi


def score_utility(factor: float, mean_score: float, centre: float, scale: float) -> float:
    """KataGo's score utility: factor * 2/pi * atan((mean_score - centre) / scale), in [-factor,
    factor]; ``centre`` and ``mean_score`` from the same player's view. (The native search
    computes the same expression in the same order, with the same libm atan.)"""
    return factor * _TWO_OVER_PI * math.atan((mean_score - centre) / scale)


def forced_playouts(k: float, prior: np.ndarray, n_total: float) -> np.ndarray:
    """KataGo's forced playouts of each child: sqrt(k * prior * total visits) (float64)."""
    return np.sqrt(k * prior.astype(np.float64) * n_total)


class Node:
    __slots__ = (
        "board",
        "parent",
        "move",
        "children",
        "legal",
        "prior",
        "raw_prior",
        "child_n",
        "child_w",
        "child_s",
        "n_total",
        "value",
        "score",
        "expanded",
        "pending",
        "terminal",
    )

    def __init__(self, board: Board, parent: Node | None = None, move: int = -1) -> None:
        self.board = board
        self.parent = parent
        self.move = move
        self.children: dict[int, Node] = {}
        self.legal: np.ndarray | None = None
        self.prior: np.ndarray | None = None
        self.raw_prior: np.ndarray | None = None
        self.child_n: np.ndarray | None = None
        self.child_w: np.ndarray | None = None
        self.child_s: np.ndarray | None = None
        self.n_total = 0.0  # sum of child_n (virtual loss included)
        self.value = 0.0  # the net's (or the final score's) value, mover's view
        self.score = 0.0  # the net's score estimate, mover's view
        self.expanded = False
        self.pending = False  # waiting for its evaluation in the current batch
        self.terminal = False

    # -- expansion -------------------------------------------------------------------------

    def expand(
        self, policy: np.ndarray, value: float, score: float, legal: np.ndarray | None = None
    ) -> None:
        """Attach the net's output (``policy`` over all N*N+1 moves, probabilities)."""
        if legal is None:
            legal = self.board.legal_mask()
        num_moves = legal.shape[0]
        prior = np.where(legal, policy.astype(np.float32, copy=False), np.float32(0.0))
        total = float(prior.sum())
        if not math.isfinite(total) or total <= 1e-12:
            # A net that puts no mass on any legal move: fall back to uniform over legal moves.
            prior = legal.astype(np.float32)
            total = float(prior.sum())
        prior /= total
        self.legal = legal
        self.prior = prior
        self.raw_prior = prior
        self.child_n = np.zeros(num_moves, np.float32)
        self.child_w = np.zeros(num_moves, np.float32)
        self.child_s = np.zeros(num_moves, np.float32)
        self.value = float(value)
        self.score = float(score)
        self.expanded = True
        self.pending = False

    def set_terminal(self, value: float, score: float) -> None:
        self.terminal = True
        self.expanded = True
        self.pending = False
        self.value = float(value)
        self.score = float(score)

    def restrict(self, mask: np.ndarray) -> None:
        """Forbid the moves where ``mask`` is False from now on (prior renormalised)."""
        assert self.legal is not None and self.raw_prior is not None
        legal = self.legal & mask
        if not legal.any():
            return
        removed = self.legal & ~legal
        if removed.any() and self.child_n is not None:
            # Visits a reused subtree spent on now-forbidden moves must not count towards the
            # new search's visit budget (the root would end with no visits on legal moves).
            self.n_total -= float(self.child_n[removed].sum())
            self.child_n[removed] = 0.0
            self.child_w[removed] = 0.0  # type: ignore[index]
            self.child_s[removed] = 0.0  # type: ignore[index]
            for move in np.flatnonzero(removed):
                self.children.pop(int(move), None)
        self.legal = legal
        raw = np.where(legal, self.raw_prior, np.float32(0.0))
        total = float(raw.sum())
        self.raw_prior = raw / total if total > 0 else legal.astype(np.float32) / legal.sum()
        self.prior = self.raw_prior

    def add_noise(self, rng: np.random.Generator, alpha: float, fraction: float) -> None:
        """Mix Dirichlet noise into the prior of the legal moves (kept off ``raw_prior``)."""
        assert self.legal is not None and self.raw_prior is not None
        idx = np.flatnonzero(self.legal)
        if fraction <= 0 or idx.size < 2:
            self.prior = self.raw_prior
            return
        noise = rng.dirichlet(np.full(idx.size, alpha, np.float64)).astype(np.float32)
        prior = self.raw_prior * np.float32(1.0 - fraction)
        prior[idx] += np.float32(fraction) * noise
        self.prior = prior

    # -- statistics ------------------------------------------------------------------------

    def q_value(self) -> float:
        """Mean value of the node for its mover: the net's value and every backed-up visit."""
        if self.child_w is None:
            return self.value
        return (self.value + float(self.child_w.sum())) / (1.0 + self.n_total)

    def mean_score(self) -> float:
        if self.child_s is None:
            return self.score
        return (self.score + float(self.child_s.sum())) / (1.0 + self.n_total)

    def select(
        self,
        c_puct: float,
        fpu_reduction: float,
        utility: tuple[float, float, float] | None = None,
        forced_k: float = 0.0,
    ) -> int:
        """The PUCT argmax over legal moves.

        ``utility`` = (factor, centre, scale) adds :func:`score_utility` of each visited
        child's mean score (and of the node's own for the first-play urgency), ``centre`` from
        this node's mover's view. ``forced_k`` > 0 (a noisy root): a visited child short of
        its :func:`forced_playouts` is chosen first (the best PUCT among such children; as in
        KataGo, forcing only tops up children that some visit reached)."""
        n = self.child_n
        w = self.child_w
        visited = n > 0
        parent_q = (self.value + float(w.sum())) / (1.0 + self.n_total)
        if utility is not None:
            factor, centre, scale = utility
            parent_q += score_utility(factor, self.mean_score(), centre, scale)
        fpu = parent_q - fpu_reduction * math.sqrt(float(self.prior[visited].sum()))
        # Unvisited children have w = 0 and n = 0: q = fpu there, w / n elsewhere.
        q = np.where(visited, w, np.float32(fpu)) / np.maximum(n, 1.0)
        if utility is not None:
            q = q + self.child_utilities(utility)
        scores = q + self.prior * ((c_puct * math.sqrt(self.n_total + 1.0)) / (1.0 + n))
        scores[~self.legal] = _NEG_INF
        if forced_k > 0:
            short = visited & self.legal
            short &= n < forced_playouts(forced_k, self.prior, self.n_total)
            if short.any():
                scores[~short] = _NEG_INF
        return int(np.argmax(scores))

    def child_utilities(self, utility: tuple[float, float, float]) -> np.ndarray:
        """float32 [moves]: the score utility of each visited child's mean score (0 elsewhere)."""
        assert self.child_n is not None and self.child_s is not None
        factor, centre, scale = utility
        out = np.zeros(self.child_n.shape[0], np.float32)
        for move in np.flatnonzero(self.child_n > 0):
            mean = float(self.child_s[move] / self.child_n[move])  # float32, as the tree holds
            out[move] = score_utility(factor, mean, centre, scale)
        return out

    def child(self, move: int) -> Node:
        node = self.children.get(move)
        if node is None:
            board = self.board.copy()
            board.play(move)
            node = Node(board, self, move)
            self.children[move] = node
        return node

    def visits(self) -> np.ndarray:
        assert self.child_n is not None
        return self.child_n

    def detach(self) -> None:
        """Make this node a root (its parent can be freed)."""
        self.parent = None
        self.move = -1
