"""OREO in the tabular tier (rlvr.suite.offline): the loss and its gradient by hand, the runs of a stacked batch not
touching each other (property), the behaviour policies, value-guided acting, and the method specs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.suite.offline import (
    behaviour_table,
    log_softmax_table,
    oreo_loss,
    positions,
    run_offline,
    value_guided,
)
from rlvr.suite.tabular import Batch, Settings, compile_task, evaluate, parse_method, policy, sample
from rlvr.suite.tasks import TASKS

MISLEADING = compile_task(TASKS["misleading_reward"])  # start 0, trap 1, path 2, won 3, lost 4; 2 turns, A / B
BETA = 0.03


def two_episodes() -> Batch:
    """(start: B, path: A) -> won, outcome 1; (start: A, trap: A) -> lost, outcome 0."""
    return Batch(states=np.array([[[0, 2], [0, 1]]]), actions=np.array([[[1, 0], [0, 0]]]),
                 rewards=np.array([[[0.0, 0.0], [1.5, 0.0]]]), results=np.zeros((1, 2, 2), bool),
                 lengths=np.array([[2, 2]]), outcomes=np.array([[1.0, 0.0]]))


def loss_and_grads(theta: np.ndarray, values: np.ndarray, kl_coef: float = 0.0):
    theta_t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    values_t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    ref = log_softmax_table(MISLEADING, torch.zeros_like(theta_t))
    loss, parts = oreo_loss(MISLEADING, theta_t, values_t, ref, *positions(MISLEADING, two_episodes()), BETA, kl_coef)
    loss.backward()
    return loss.item(), parts, theta_t.grad.numpy(), values_t.grad.numpy()


def test_the_loss_and_its_gradient_at_the_start_by_hand():
    # theta = 0 (= pi_ref: every log-ratio 0), V = 0. Value errors V - R + beta * to_go = -R: episode 1 [-1, -1],
    # episode 2 [0, 0]; per-episode means of the squares 1 and 0, batch mean 1/2. The policy errors are the same.
    loss, parts, g_theta, g_values = loss_and_grads(np.zeros((1, 10, 2)), np.zeros((1, 10)))
    assert parts == pytest.approx({"value": 0.5, "policy": 0.5, "kl": 0.0})
    assert loss == pytest.approx(1.0)
    # dL/dV(x) = 1/2 (episodes) * 1/2 (turns) * 2 (V - R) = -1/2 at (start, 0) and (path, 1); (trap, 1): R = 0
    expected = np.zeros(10)
    expected[[0 * 2 + 0, 2 * 2 + 1]] = -0.5
    assert g_values[0] == pytest.approx(expected)
    # policy: 1/4 * 2 * (-R) * beta * (onehot(a) - pi) = -0.015 * (onehot(a) - 1/2): towards B at the start and
    # towards A on the path (gradient descent moves against these); the lost episode and the KL (at pi = pi_ref) add 0
    assert g_theta[0, 0] == pytest.approx([0.0075, -0.0075])
    assert g_theta[0, 2 * 2 + 1] == pytest.approx([-0.0075, 0.0075])
    assert np.count_nonzero(g_theta) == 4


def test_the_loss_with_a_moved_table_by_hand():
    # pi(B | start) = 3/4: log-ratio l = ln(3/4 / 1/2) = ln 1.5 on episode 1's first action, ln(1/4 / 1/2) = -ln 2 on
    # episode 2's first action; V(start, 0) = 0.2, everything else 0.
    theta = np.zeros((1, 10, 2))
    theta[0, 0] = [0.0, math.log(3.0)]
    values = np.zeros((1, 10))
    values[0, 0] = 0.2
    l1, l2 = math.log(1.5), -math.log(2.0)
    # value: to-go from turn 0 includes the first action, from turn 1 not; policy: the first action's own ratio and
    # nothing later (the second turns are at pi_ref)
    value = ((0.2 - 1 + BETA * l1) ** 2 + 1.0) / 2 / 2 + ((0.2 + BETA * l2) ** 2 + 0.0) / 2 / 2
    kl_start = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)  # KL(pi || pi_ref) at the start, 0 elsewhere
    _, parts, _, _ = loss_and_grads(theta, values, kl_coef=0.01)
    assert parts["value"] == pytest.approx(value, rel=1e-12)
    assert parts["policy"] == pytest.approx(value, rel=1e-12)  # one action per step: the same errors here
    assert parts["kl"] == pytest.approx(kl_start / 2, rel=1e-12)  # each episode: (KL at turn 0 + 0) / 2


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(["delayed_consequence", "early_stop", "repeated_states"]))
def test_stacked_runs_each_get_their_own_gradient(seed, name):
    """The summed loss of N stacked runs gives each run exactly the gradient of its own loss alone."""
    c = compile_task(TASKS[name])
    rng = np.random.default_rng(seed)
    N, X, A = 3, c.n_states * c.task.turns, c.n_actions
    theta = rng.normal(0, 1, (N, X, A))
    values = rng.normal(0, 1, (N, X))
    data = sample(c, policy(c, rng.normal(0, 1, (N, X, A))), 5, rng)

    def grads(th, v, batch):
        th = torch.tensor(th, requires_grad=True)
        v = torch.tensor(v, requires_grad=True)
        ref = log_softmax_table(c, torch.zeros_like(th))
        oreo_loss(c, th, v, ref, *positions(c, batch), BETA, 0.01)[0].backward()
        return th.grad.numpy(), v.grad.numpy()

    stacked = grads(theta, values, data)
    for n in range(N):
        alone = Batch(*(getattr(data, f)[n: n + 1] for f in Batch.__dataclass_fields__))
        own = grads(theta[n: n + 1], values[n: n + 1], alone)
        assert np.allclose(stacked[0][n], own[0][0], atol=1e-12) and np.allclose(stacked[1][n], own[1][0], atol=1e-12)


def test_behaviour_policies():
    c = compile_task(TASKS["delayed_consequence"])
    assert evaluate(c, behaviour_table(c, "uniform", 0.5)[None])[0][0] == pytest.approx(1 / 16)
    assert evaluate(c, behaviour_table(c, "mixed", 1.0)[None])[0][0] == pytest.approx(1.0)  # the optimum itself
    # mix 1/2: each of the two right choices with probability 1/2 + 1/2 * 1/4
    assert evaluate(c, behaviour_table(c, "mixed", 0.5)[None])[0][0] == pytest.approx((5 / 8) ** 2)


def test_value_guided_acting_reads_the_learnt_values_not_the_outcome():
    c = MISLEADING
    values = np.zeros((1, 10))
    log_ratio = np.zeros((1, 10, 2))
    values[0, 2 * 2 + 1] = 0.9  # V(path, 1) > V(trap, 1) = 0: B at the start
    log_ratio[0, 2 * 2 + 1] = [0.4, -0.4]  # the last turn ends the episode: V(path, 1) + beta log-ratio ranks A first
    pi = value_guided(c, values, log_ratio)
    assert pi[0, 0].tolist() == [0.0, 1.0] and pi[0, 2 * 2 + 1].tolist() == [1.0, 0.0]
    assert evaluate(c, pi)[0][0] == 1.0
    log_ratio[0, 2 * 2 + 1] = [-0.4, 0.4]  # learnt the wrong last move: acted on, though the outcome says otherwise
    assert evaluate(c, value_guided(c, values, log_ratio))[0][0] == 0.0


def test_runs_are_reproducible_and_the_ways_of_acting_share_their_training():
    settings_ = Settings(updates=2, seed=3)
    a = run_offline(MISLEADING, parse_method("oreo:steps=5"), 6, settings_)
    b = run_offline(MISLEADING, parse_method("oreo:steps=5"), 6, settings_)
    assert np.array_equal(a.curve, b.curve) and a.curve.shape == (6, 6) and (a.curve[:, 0] == 0.25).all()
    other = run_offline(MISLEADING, parse_method("oreo:steps=5"), 6, Settings(updates=2, seed=4))
    assert not np.array_equal(a.curve, other.curve)
    # the same data and steps (`select` is not part of the data's seed): after 5 steps every table ranks the right
    # actions first, so its most likely action is optimal while sampling it is about halfway
    greedy = run_offline(MISLEADING, parse_method("oreo:steps=5,select=greedy"), 6, settings_)
    assert (greedy.curve[:, -1] == 1.0).all() and (a.curve[:, -1] < 0.6).all()


def test_oreo_specs():
    m = parse_method("oreo:behaviour=mixed,mix=0.25,select=value")
    assert m.is_offline and m.options == {"behaviour": "mixed", "mix": 0.25, "select": "value"}
    with pytest.raises(ValueError, match="behaviour must be one of"):
        parse_method("oreo:behaviour=expert")
    with pytest.raises(ValueError, match=r"oreo has no parameter\(s\) \['gamma'\]"):
        parse_method("oreo:gamma=1")
    with pytest.raises(ValueError, match="integer steps >= 1"):
        parse_method("oreo:steps=0.5")
