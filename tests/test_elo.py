"""kgrpc.elo: Elo difference, confidence interval, SPRT decisions."""

import math

import pytest

from kgrpc import elo


def test_even_match_is_zero_elo() -> None:
    assert elo.elo_diff(10, 10, 0) == 0.0
    assert elo.elo_diff(0, 0, 8) == 0.0


def test_known_values() -> None:
    # 75% score -> 400*log10(3) = 190.85
    assert elo.elo_diff(3, 1, 0) == pytest.approx(400 * math.log10(3))
    assert elo.elo_diff(1, 3, 0) == pytest.approx(-400 * math.log10(3))
    # draws count half: 2 wins + 2 draws of 4 = 75%
    assert elo.elo_diff(2, 0, 2) == pytest.approx(400 * math.log10(3))


def test_perfect_scores_are_finite() -> None:
    assert math.isfinite(elo.elo_diff(400, 0, 0)) and elo.elo_diff(400, 0, 0) > 500
    assert math.isfinite(elo.elo_diff(0, 5, 0)) and elo.elo_diff(0, 5, 0) < 0


def test_interval_contains_estimate_and_shrinks() -> None:
    small = elo.elo_interval(30, 20, 0)
    big = elo.elo_interval(300, 200, 0)
    assert small.low < small.elo < small.high
    assert big.elo == pytest.approx(small.elo)
    assert (big.high - big.low) < (small.high - small.low)


def test_no_games_is_an_error() -> None:
    with pytest.raises(ValueError, match="no games"):
        elo.elo_diff(0, 0, 0)
    with pytest.raises(ValueError, match="negative"):
        elo.elo_interval(-1, 2, 0)


def test_sprt_decisions() -> None:
    assert elo.sprt(0, 0, 0) == "continue"
    assert elo.sprt(6, 4, 0) == "continue"
    assert elo.sprt(150, 50, 0) == "accept"
    assert elo.sprt(50, 150, 0) == "reject"
    lower, upper = elo.sprt_bounds(0.05, 0.05)
    assert lower == pytest.approx(-2.944, abs=1e-3) and upper == pytest.approx(2.944, abs=1e-3)
    # an exactly even result leans to H0 (elo0 = 0) but needs many games to decide
    assert elo.sprt_llr(100, 100, 0) < 0


def test_interval_of_a_clean_sweep_is_one_sided_and_not_a_point() -> None:
    sweep = elo.elo_interval(16, 0, 0)
    assert sweep.high == float("inf")
    assert 150 < sweep.low < sweep.elo  # far from zero width
    assert elo.elo_interval(0, 16, 0).low == float("-inf")
    even = elo.elo_interval(8, 8, 0)
    assert even.elo == pytest.approx(0.0) and even.low == pytest.approx(-even.high)


@pytest.mark.parametrize(
    ("dof", "critical"), [(1, 3.841459), (2, 5.991465), (3, 7.814728), (4, 9.487729), (5, 11.0705)]
)
def test_chi_square_survival_at_the_tables_5_percent_points(dof: int, critical: float) -> None:
    # The 95th percentiles of the chi-square distribution, as printed in statistics tables.
    assert elo.chi_square_survival(critical, dof) == pytest.approx(0.05, abs=1e-5)
    assert elo.chi_square_survival(0.0, dof) == pytest.approx(1.0)


def test_same_rate_test_on_equal_and_far_apart_tallies() -> None:
    chi2, dof, p = elo.same_rate_test([(30, 100), (30, 100), (30, 100)])
    assert (chi2, dof, p) == (pytest.approx(0.0), 2, pytest.approx(1.0))
    # 20 of 100 against 50 of 100: pooled 0.35, so 35 wins and 65 losses expected in each;
    # every cell is 15 off.
    chi2, dof, p = elo.same_rate_test([(20, 100), (50, 100)])
    assert dof == 1 and chi2 == pytest.approx(2 * (225 / 35 + 225 / 65))
    assert p < 1e-4
    with pytest.raises(ValueError, match="at least two"):
        elo.same_rate_test([(5, 10)])
    with pytest.raises(ValueError, match="all wins or all losses"):
        elo.same_rate_test([(10, 10), (5, 5)])
