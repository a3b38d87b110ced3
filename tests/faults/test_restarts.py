"""rlvr.restarts.RestartBudget: a rate of restarts (at most `limit` within any `window_s`), one log line each."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.restarts import RestartBudget, RestartsSpent


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_three_restarts_within_the_window_then_refused_until_the_oldest_leaves_it(caplog):
    clock = Clock()
    budget = RestartBudget("the engine", limit=3, window_s=600.0, clock=clock)
    caplog.set_level(logging.WARNING, logger="rlvr.restarts")
    for t in (0.0, 100.0, 200.0):
        clock.now = t
        budget.spend("died (exit code -9)")
    assert [r.getMessage() for r in caplog.records] == [
        f"the engine died (exit code -9): restarting it (restart {k} of 3 within 600 s)" for k in (1, 2, 3)]
    clock.now = 599.9  # the restart at 0 s is still within the last 600 s
    with pytest.raises(RestartsSpent, match=r"^the engine hung, and was restarted 3 times in the last 600 s: not "
                                            r"restarting it again now"):
        budget.spend("hung")
    clock.now = 600.0  # now it is not: one restart is free again (the 2nd and 3rd still count)
    budget.spend("hung")
    assert caplog.records[-1].getMessage() == "the engine hung: restarting it (restart 3 of 3 within 600 s)"
    assert budget.restarts == 4


def test_a_budget_of_zero_refuses_every_restart():
    with pytest.raises(RestartsSpent, match="restarted 0 times"):
        RestartBudget("x", limit=0).spend("died")


@pytest.mark.parametrize(("limit", "window"), [(-1, 1.0), (1.5, 1.0), (1, 0.0), (1, -3.0)])
def test_bad_limits_are_refused(limit, window):
    with pytest.raises(ValueError, match="RestartBudget"):
        RestartBudget("x", limit=limit, window_s=window)


@given(st.integers(0, 5), st.floats(1.0, 100.0), st.lists(st.floats(0.0, 50.0), max_size=40))
def test_never_more_than_limit_restarts_in_any_window(limit, window, gaps):
    clock = Clock()
    budget = RestartBudget("x", limit=limit, window_s=window, clock=clock)
    granted = []
    for gap in gaps:
        clock.now += gap
        try:
            budget.spend("died")
            granted.append(clock.now)
        except RestartsSpent:
            # refused only when `limit` restarts happened within the window before now
            assert sum(clock.now - t < window for t in granted) >= limit
    for t in granted:  # no window [t, t + window) holds more than `limit` granted restarts
        assert sum(t <= u < t + window for u in granted) <= limit
