"""Gumbel root search (Danihelka et al., "Policy improvement by planning with Gumbel", ICLR 2022).

At the root of a search, m actions are sampled without replacement by Gumbel-top-k (the m
largest ``gumbel + log prior``), sequential halving spends the visit budget on them (each
phase visits its survivors equally, then keeps the better half by ``gumbel + logit +
sigma(Q)``), the move played is the best survivor, and the training target is the prior
improved by the completed Q-values: ``softmax(logit + sigma(completed Q))``, where an
unvisited action's Q is the mixed value (the net's value of the root mixed with the visited
actions' prior-weighted Q) and ``sigma(q) = (c_visit + max visits) * c_scale * q`` on Q
mapped from the value's bounds onto [0, 1]. Interior nodes keep PUCT.

The native core (``native/src/gumbel.cpp``) is the same algorithm in the same float order:
every sum runs in move order on Python floats, every log/exp/atan is the math module's (C's
libm), so with no Gumbel noise both searches build the same trees (docs/native.md).
"""

from __future__ import annotations

import math

import numpy as np

from kgrpc.mcts.tree import Node, score_utility

__all__ = ["GumbelRoot", "halving_schedule"]

# A legal move the net gives no probability keeps a finite logit (mctx clamps the same way).
_MIN_PRIOR = 1e-30


def halving_schedule(considered: int, budget: int) -> list[int]:
    """Sequential halving's schedule: for simulation i, the visit count (in this search) that
    the chosen action must have. Each phase gives its ``alive`` actions
    ``budget // (ceil(log2 m) * alive)`` visits each (at least one), then halves them (to no
    fewer than two); the schedule has exactly ``budget`` entries."""
    if budget <= 0:
        return []
    if considered <= 1:
        return list(range(budget))
    phases = (considered - 1).bit_length()  # ceil(log2(considered))
    out: list[int] = []
    alive, level = considered, 0
    while len(out) < budget:
        extra = max(1, budget // (phases * alive))
        for _ in range(extra):
            out.extend([level] * alive)
            level += 1
        alive = max(2, alive // 2)
    return out[:budget]


class GumbelRoot:
    """One search's root state: logits, Gumbel draws, the considered moves, the schedule.

    ``utility`` is the search's score utility (factor, centre from the root mover's view,
    scale) or None."""

    def __init__(
        self,
        root: Node,
        budget: int,
        *,
        considered: int,
        c_visit: float,
        c_scale: float,
        noise_scale: float,
        rng: np.random.Generator,
        utility: tuple[float, float, float] | None = None,
    ) -> None:
        assert root.legal is not None and root.prior is not None
        self.root = root
        self.c_visit = float(c_visit)
        self.c_scale = float(c_scale)
        self.utility = utility
        self.legal = [int(m) for m in np.flatnonzero(root.legal)]
        assert self.legal, "a root always has a legal move (pass)"
        prior = root.prior
        self.logit = {m: math.log(max(float(prior[m]), _MIN_PRIOR)) for m in self.legal}
        if noise_scale != 0.0:
            u = rng.random(len(self.legal))
            u = np.where(u > 0.0, u, np.finfo(np.float64).tiny)
            draws = [noise_scale * -math.log(-math.log(float(x))) for x in u]
        else:
            draws = [0.0] * len(self.legal)
        self.base = {m: g + self.logit[m] for m, g in zip(self.legal, draws, strict=True)}
        # Gumbel-top-k: a sample of m moves without replacement from softmax(logits); equal
        # keys keep move order (as the native stable sort does).
        order = sorted(self.legal, key=lambda m: -self.base[m])
        m = min(max(int(considered), 1), len(order))
        self.considered = sorted(order[:m])
        self.schedule = halving_schedule(m, int(budget))
        self.count = dict.fromkeys(self.legal, 0)
        self.sims = 0
        self.sigma: dict[int, float] = {}
        self.refresh()

    @property
    def budget(self) -> int:
        return len(self.schedule)

    def _utility(self, mean: float) -> float:
        factor, centre, scale = self.utility  # type: ignore[misc]
        return score_utility(factor, mean, centre, scale)

    def refresh(self) -> None:
        """sigma(completed Q) of every legal move from the root's statistics now (called when
        a round of descents begins, with no visit in flight, and before the move is chosen)."""
        q, max_visits = self.completed_q()
        # Q onto [0, 1] by the value's bounds ([-1, 1], widened by the score utility's factor):
        # not by the Q-values' own range, which would blow near-equal Q-values' noise up to
        # the whole scale.
        bound = 1.0 + (self.utility[0] if self.utility is not None else 0.0)
        lo, span = -bound, 2.0 * bound
        scale = (self.c_visit + max_visits) * self.c_scale
        self.sigma = {m: scale * ((q[m] - lo) / span) for m in self.legal}

    def completed_q(self) -> tuple[dict[int, float], float]:
        """(Q of every legal move, the largest visit count): a visited move's mean value (and
        score utility), an unvisited one's the mixed value of the paper's Appendix D."""
        root = self.root
        n, w, s = root.child_n, root.child_w, root.child_s
        assert n is not None and w is not None and s is not None and root.prior is not None
        q: dict[int, float] = {}
        visits = max_visits = mass = weighted = 0.0
        for m in self.legal:
            nm = n[m]
            if not nm > 0:
                continue
            qm = w[m] / nm  # float32, the PUCT search's q
            if self.utility is not None:
                qm = qm + np.float32(self._utility(float(s[m] / nm)))
            q[m] = float(qm)
            p = max(float(root.prior[m]), _MIN_PRIOR)
            visits += float(nm)
            max_visits = max(max_visits, float(nm))
            mass += p
            weighted += p * q[m]
        raw = float(root.value)
        if self.utility is not None:
            raw += self._utility(float(root.score))
        mixed = (raw + visits * (weighted / mass)) / (visits + 1.0) if visits > 0 else raw
        for m in self.legal:
            if m not in q:
                q[m] = mixed
        return {m: q[m] for m in self.legal}, max_visits

    def select(self) -> int:
        """The move of the next simulation (counted as begun)."""
        want = self.schedule[self.sims]
        best, best_score = -1, 0.0
        for m in self.considered:
            if self.count[m] != want:
                continue
            score = self.base[m] + self.sigma[m]
            if best < 0 or score > best_score:
                best, best_score = m, score
        assert best >= 0, "the schedule asks only for counts some survivor has"
        self.count[best] += 1
        self.sims += 1
        return best

    def undo(self, move: int) -> None:
        """Take back a simulation whose descent was reverted (its leaf was already waiting)."""
        assert self.count[move] > 0 and self.sims > 0
        self.count[move] -= 1
        self.sims -= 1

    def final_move(self) -> int:
        """The considered move with the most visits in this search, best by gumbel + logit +
        sigma: the move to play."""
        most = max(self.count[m] for m in self.considered)
        best, best_score = -1, 0.0
        for m in self.considered:
            if self.count[m] != most:
                continue
            score = self.base[m] + self.sigma[m]
            if best < 0 or score > best_score:
                best, best_score = m, score
        return best

    def improved_policy(self) -> tuple[list[int], list[float]]:
        """softmax(logit + sigma) over the legal moves, as sparse (moves, probabilities): the
        moves it gives any probability, in move order."""
        top = max(self.logit[m] + self.sigma[m] for m in self.legal)
        e = {m: math.exp(self.logit[m] + self.sigma[m] - top) for m in self.legal}
        total = 0.0
        for m in self.legal:
            total += e[m]
        moves = [m for m in self.legal if e[m] / total > 0]
        return moves, [e[m] / total for m in moves]
