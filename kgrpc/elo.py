"""Elo arithmetic for gating matches (pure maths; no numpy, no torch).

A match between a candidate and a reference gives wins, losses and draws from the
candidate's side. Its score rate is ``w = (wins + draws/2) / games`` and its Elo
difference ``400 * log10(w / (1 - w))``. A rate of exactly 0 or 1 has no finite Elo,
so it is pulled half a game away from the edge (``1/(2n)``) before converting.

The 95% confidence interval is the Wilson score interval of the score rate, converted to
Elo at both ends: unlike the plain normal approximation it stays honest for the lopsided
results of short matches (16-0 gives roughly [+250, +inf) rather than a zero-width
interval); an end at rate 0 or 1 is reported as -inf / +inf.

The sequential test (:func:`sprt`) is the normal-approximation generalised SPRT used
by Leela Zero-style gating servers: hypotheses H0 "Elo = elo0" and H1 "Elo = elo1",
with ``LLR = (s1 - s0) * (2*sum(x) - n*(s0 + s1)) / (2 * var)`` where ``s0, s1`` are the
expected scores of the two Elo values and ``var`` the observed per-game variance.
It accepts H1 (release) when ``LLR >= log((1-beta)/alpha)`` and H0 (reject) when
``LLR <= log(beta/(1-alpha))``.

:func:`same_rate_test` asks whether several matches' win-loss tallies (different runs of a
recipe, or arms of an ablation, against one reference) differ more than samples of one
common win rate would: Pearson's chi-square against the pooled rate, ``len - 1`` degrees
of freedom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Z95 = 1.959963984540054
# Per-game variance floor: a streak of identical results has zero observed variance.
_MIN_VARIANCE = 1e-3

SprtDecision = Literal["accept", "reject", "continue"]


def score_to_elo(rate: float) -> float:
    """Elo difference of an expected score ``rate`` in (0, 1)."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"score rate must be strictly between 0 and 1, got {rate}")
    return 400.0 * math.log10(rate / (1.0 - rate))


def elo_to_score(elo: float) -> float:
    """Expected score of a player ``elo`` points stronger than its opponent."""
    return 1.0 / (1.0 + 10.0 ** (-elo / 400.0))


def _check(wins: int, losses: int, draws: int) -> int:
    if min(wins, losses, draws) < 0:
        raise ValueError(f"negative game count: wins={wins} losses={losses} draws={draws}")
    games = wins + losses + draws
    if games == 0:
        raise ValueError("no games played")
    return games


def _clamped_rate(rate: float, games: int) -> float:
    edge = 0.5 / games
    return min(max(rate, edge), 1.0 - edge)


def score_rate(wins: int, losses: int, draws: int) -> float:
    """``(wins + draws/2) / games``."""
    games = _check(wins, losses, draws)
    return (wins + 0.5 * draws) / games


def elo_diff(wins: int, losses: int, draws: int) -> float:
    """Elo difference 400*log10(w/(1-w)); ValueError with no games."""
    games = _check(wins, losses, draws)
    return score_to_elo(_clamped_rate((wins + 0.5 * draws) / games, games))


@dataclass(frozen=True)
class EloEstimate:
    games: int
    rate: float
    elo: float
    low: float
    high: float


def wilson_interval(rate: float, games: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval (low, high) of a rate observed over ``games`` games."""
    if games <= 0:
        raise ValueError("no games played")
    z2n = z * z / games
    centre = (rate + z2n / 2.0) / (1.0 + z2n)
    half = z * math.sqrt(rate * (1.0 - rate) / games + z2n / (4.0 * games)) / (1.0 + z2n)
    return max(0.0, centre - half), min(1.0, centre + half)


def chi_square_survival(chi2: float, dof: int) -> float:
    """P(X >= chi2) for a chi-square variable with ``dof`` degrees of freedom (closed forms:
    the Poisson sum for even ``dof``, erfc plus a series for odd)."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    half = chi2 / 2.0
    if dof % 2 == 0:
        term, total = 1.0, 1.0
        for i in range(1, dof // 2):
            term *= half / i
            total += term
        return math.exp(-half) * total
    total = math.erfc(math.sqrt(half))
    term = math.sqrt(2.0 * chi2 / math.pi) * math.exp(-half)  # the dof-3 term over dof 1
    for i in range(1, (dof + 1) // 2):
        total += term
        term *= chi2 / (2 * i + 1)
    return total


def same_rate_test(tallies: list[tuple[int, int]]) -> tuple[float, int, float]:
    """(chi-square, degrees of freedom, p) of (wins, games) tallies against their pooled
    win rate; a small p says the tallies differ more than samples of one rate would."""
    if len(tallies) < 2:
        raise ValueError("the test compares at least two tallies")
    wins, games = sum(w for w, _ in tallies), sum(n for _, n in tallies)
    if not 0 < wins < games:
        raise ValueError("the pooled tallies are all wins or all losses: no rate to test")
    rate = wins / games
    chi2 = sum(
        (w - n * rate) ** 2 / (n * rate) + ((n - w) - n * (1 - rate)) ** 2 / (n * (1 - rate))
        for w, n in tallies
    )
    dof = len(tallies) - 1
    return chi2, dof, chi_square_survival(chi2, dof)


def elo_interval(wins: int, losses: int, draws: int, z: float = Z95) -> EloEstimate:
    """Elo difference with its confidence interval (95% by default)."""
    games = _check(wins, losses, draws)
    rate = (wins + 0.5 * draws) / games
    low, high = wilson_interval(rate, games, z)
    return EloEstimate(
        games=games,
        rate=rate,
        elo=score_to_elo(_clamped_rate(rate, games)),
        low=_rate_to_elo_or_inf(low),
        high=_rate_to_elo_or_inf(high),
    )


def _rate_to_elo_or_inf(rate: float) -> float:
    if rate <= 1e-12:
        return -math.inf
    if rate >= 1.0 - 1e-12:
        return math.inf
    return score_to_elo(rate)


def sprt_llr(wins: int, losses: int, draws: int, elo0: float = 0.0, elo1: float = 35.0) -> float:
    """Log-likelihood ratio of H1 (Elo = elo1) against H0 (Elo = elo0); 0 with no games."""
    games = wins + losses + draws
    if games == 0:
        return 0.0
    _check(wins, losses, draws)
    total = wins + 0.5 * draws
    rate = total / games
    var = (wins * (1.0 - rate) ** 2 + losses * rate**2 + draws * (0.5 - rate) ** 2) / games
    var = max(var, _MIN_VARIANCE)
    s0, s1 = elo_to_score(elo0), elo_to_score(elo1)
    return (s1 - s0) * (2.0 * total - games * (s0 + s1)) / (2.0 * var)


def sprt_bounds(alpha: float = 0.05, beta: float = 0.05) -> tuple[float, float]:
    """(lower, upper) LLR bounds: below lower accept H0, above upper accept H1."""
    if not (0.0 < alpha < 1.0 and 0.0 < beta < 1.0):
        raise ValueError(f"alpha and beta must be in (0, 1), got {alpha}, {beta}")
    return math.log(beta / (1.0 - alpha)), math.log((1.0 - beta) / alpha)


def sprt(
    wins: int,
    losses: int,
    draws: int,
    elo0: float = 0.0,
    elo1: float = 35.0,
    alpha: float = 0.05,
    beta: float = 0.05,
) -> SprtDecision:
    """ "accept" (H1: the candidate is stronger), "reject" (H0) or "continue"."""
    lower, upper = sprt_bounds(alpha, beta)
    llr = sprt_llr(wins, losses, draws, elo0, elo1)
    if llr >= upper:
        return "accept"
    if llr <= lower:
        return "reject"
    return "continue"
