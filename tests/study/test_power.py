"""rlvr.study.power: hand-computed cases (WebShop's SFT success rate, 0.77) and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.study.power import detectable_difference, rollouts_for, unit_variance

Z = 1.959964 + 0.841621  # z_0.975 + z_0.8


def test_hand_computed_cases_at_the_sft_models_success_rate():
    # 2 rollouts per goal, 50 goals, one seed: variance 2 * 0.77 * 0.23 / 2 = 0.1771 per goal
    assert unit_variance(0.77, 2) == pytest.approx(0.1771)
    assert detectable_difference(0.77, 2, 50) == pytest.approx(Z * (0.1771 / 50) ** 0.5, rel=1e-5)  # 0.167
    # 4 rollouts per goal over 50 goals x 3 seeds resolve 0.08; 3 barely do, 2 do not
    assert detectable_difference(0.77, 4, 150) == pytest.approx(0.0681, abs=1e-3)
    assert detectable_difference(0.77, 3, 150) == pytest.approx(0.0786, abs=1e-3)
    assert rollouts_for(0.08, 0.77, 150) == 3
    assert rollouts_for(0.08, 0.77, 50) == 9
    # a spread of true differences that 150 units cannot average away: no number of rollouts suffices
    assert rollouts_for(0.08, 0.77, 150, between_sd=0.5) is None


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="success rate"):
        unit_variance(1.2, 2)
    with pytest.raises(ValueError, match="at least 1"):
        detectable_difference(0.5, 0, 10)
    with pytest.raises(ValueError, match="probabilities"):
        detectable_difference(0.5, 2, 10, power=1.0)
    with pytest.raises(ValueError, match="positive"):
        rollouts_for(0.0, 0.5, 10)


@given(rate=st.floats(0.01, 0.99), units=st.integers(1, 500), difference=st.floats(0.01, 0.5),
       between=st.floats(0, 0.2))
def test_rollouts_for_is_the_fewest_that_detect_the_difference(rate, units, difference, between):
    k = rollouts_for(difference, rate, units, between_sd=between)
    if k is None:
        assert detectable_difference(rate, 10**6, units, between_sd=between) > difference * (1 - 1e-6)
    else:
        assert detectable_difference(rate, k, units, between_sd=between) <= difference * (1 + 1e-9)
        if k > 1:
            assert detectable_difference(rate, k - 1, units, between_sd=between) > difference


@given(rate=st.floats(0.0, 1.0), k=st.integers(1, 64), units=st.integers(1, 500))
def test_more_rollouts_or_units_never_make_the_bound_worse(rate, k, units):
    d = detectable_difference(rate, k, units)
    assert detectable_difference(rate, k + 1, units) <= d + 1e-15
    assert detectable_difference(rate, k, units + 1) <= d + 1e-15
