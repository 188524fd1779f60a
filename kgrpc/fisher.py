"""Fisher's exact test of a 2x2 table, two-sided, in pure Python (no scipy).

The coordinator uses it to ask whether one worker token's candidate win rate on a gating
pairing differs from the other tokens' by more than chance (kgrpc.coordinator.quorum)::

                 wins    other games
    token         a          b
    the others    c          d

With the margins fixed, the token's win count follows the hypergeometric distribution; the
two-sided p-value is the probability, under the null hypothesis that every token plays the
same match, of a table at most as likely as the one seen (the "minimum likelihood" rule R's
``fisher.test`` and scipy's ``fisher_exact`` use, with the same relative tolerance for ties).
The test is exact, so at level ``alpha`` it rejects a true null with probability at most
``alpha`` (less, for the discreteness of small tables).
"""

from __future__ import annotations

import math

# Tables within this relative distance of the observed one's probability count as as likely
# (floating-point ties), as in R and scipy.
_TIES = 1e-7


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """The two-sided p-value of the table ``[[a, b], [c, d]]`` (non-negative counts)."""
    if min(a, b, c, d) < 0:
        raise ValueError(f"counts must be >= 0, got {(a, b, c, d)}")
    row1, col1, n = a + b, a + c, a + b + c + d
    low, high = max(0, col1 - (n - row1)), min(row1, col1)
    if low == high:
        return 1.0  # the margins allow one table only
    norm = _log_comb(n, col1)

    def log_p(x: int) -> float:
        return _log_comb(row1, x) + _log_comb(n - row1, col1 - x) - norm

    seen = log_p(a)
    bound = seen + math.log1p(_TIES)
    total = 0.0
    for x in range(low, high + 1):
        lp = log_p(x)
        if lp <= bound:
            total += math.exp(lp)
    return min(1.0, total)
