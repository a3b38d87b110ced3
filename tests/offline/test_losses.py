"""OREO's losses: hand-computed cases, golden cases from the original code, and properties.

Golden cases (fixtures/oreo_golden.json) were computed by running the released loss code on CPU, outside this
repository, from a scratch copy of jwhj/OREO at commit 6f7403b:

    mkdir /tmp/oreo_golden && cd /tmp/oreo_golden
    git -C <OREO checkout> show HEAD:openrlhf/trainer/pcl_trainer.py > pcl_trainer.py
    python golden.py   # builds PCLTrainer with object.__new__ (beta=0.03), feeds seeded logits through its
                       # accumulated_logps, loss (value loss), dro_loss (step_level False and True) and the KL
                       # term of fit() (unbiased_kl: F.kl_div(...).sum(-1); else k3) with kl_reg=0.01, and records
                       # every loss and the gradients w.r.t. the policy logits and the values.

The fixture holds the inputs and the original's outputs; only numbers were copied, no code. The original's tensors
are [B, L] (ids) and [B, L-1] (positions); its action mask is shifted by one (`action_masks[:, 1:]`) and its
state mask is cut (`state_masks[:, :-1]`), which is the layout rlvr.offline.losses uses directly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rlvr.offline.losses import (
    exact_kl,
    k3_kl,
    kl_regularizer,
    logratio_to_go,
    next_state_index,
    policy_loss,
    value_loss,
)

GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "oreo_golden.json").read_text())


# --- hand-computed ---------------------------------------------------------------------------------------------
# One sequence, three positions, all of them actions: log pi = [-1, -2, -0.5], log pi_ref = [-1.5, -1, -0.5]
# -> log-ratios [0.5, -1, 0], to go (suffix sums) [-0.5, -1, 0]. beta = 0.1, R = 1, V = [0.2, 0.4, 0.9].
LOGPS = torch.tensor([[-1.0, -2.0, -0.5]])
REF = torch.tensor([[-1.5, -1.0, -0.5]])
ACTIONS = torch.ones(1, 3)
VALUES = torch.tensor([[0.2, 0.4, 0.9]])
R = torch.tensor([1.0])


def test_logratio_to_go_is_the_suffix_sum_over_actions():
    assert logratio_to_go(LOGPS, REF, ACTIONS).tolist() == [[-0.5, -1.0, 0.0]]
    # a non-action position adds nothing (an environment token between two turns)
    assert logratio_to_go(LOGPS, REF, torch.tensor([[1.0, 0.0, 1.0]])).tolist() == [[0.5, 0.0, 0.0]]


def test_value_loss_by_hand():
    # errors V - R + beta * to_go = [0.2 - 1 - 0.05, 0.4 - 1 - 0.1, 0.9 - 1 + 0] = [-0.85, -0.7, -0.1]
    # loss = (0.7225 + 0.49 + 0.01) / 3 = 0.4075; dL/dV = 2 * error / 3
    values = VALUES.clone().requires_grad_(True)
    loss = value_loss(values, logratio_to_go(LOGPS, REF, ACTIONS), torch.ones(1, 3), R, beta=0.1)
    loss.backward()
    assert loss.item() == pytest.approx(0.4075)
    assert values.grad.tolist()[0] == pytest.approx([-1.7 / 3, -1.4 / 3, -0.2 / 3])


def test_token_level_policy_loss_by_hand():
    # same errors as the value loss; each state's error moves only its own token: dL/dlogp_t = 2 * err_t * beta / 3
    logps = LOGPS.clone().requires_grad_(True)
    loss = policy_loss(logps, REF, ACTIONS, VALUES, torch.ones(1, 3), R, beta=0.1)
    loss.backward()
    assert loss.item() == pytest.approx(0.4075)
    assert logps.grad.tolist()[0] == pytest.approx([-0.17 / 3, -0.14 / 3, -0.02 / 3])


def test_step_level_policy_loss_by_hand():
    # two steps: positions {0, 1} and {2}; states at 0 and 2. errors -0.85 and -0.1; loss (0.7225 + 0.01) / 2.
    # The first step's error moves both of its tokens: 2 * (-0.85) * 0.1 / 2 = -0.085 each; the second -0.01.
    logps = LOGPS.clone().requires_grad_(True)
    loss = policy_loss(logps, REF, ACTIONS, VALUES, torch.tensor([[1.0, 0.0, 1.0]]), R, beta=0.1)
    loss.backward()
    assert loss.item() == pytest.approx(0.36625)
    assert logps.grad.tolist()[0] == pytest.approx([-0.085, -0.085, -0.01])


def test_kl_estimators_by_hand():
    # pi = [0.5, 0.5], pi_ref = [0.25, 0.75]: KL = 0.5 ln 2 + 0.5 ln(2/3) = 0.1438410
    # k3 at the sampled token 0: r = ln(0.25 / 0.5) -> exp(r) - r - 1 = 0.5 + ln 2 - 1 = 0.1931472
    policy = torch.log(torch.tensor([[[0.5, 0.5]]]))
    ref = torch.log(torch.tensor([[[0.25, 0.75]]]))
    assert exact_kl(policy, ref).item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert k3_kl(policy[..., 0], ref[..., 0]).item() == pytest.approx(0.5 + math.log(2) - 1)
    # averaged per sequence over its actions, then over sequences: (2 + 4) / 2 / 2 ... seq 0 mean 2, seq 1 mean 6
    per_token = torch.tensor([[1.0, 3.0, 100.0], [6.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert kl_regularizer(per_token, mask).item() == pytest.approx((2.0 + 6.0) / 2)


def test_next_state_index():
    mask = torch.tensor([[0, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0]])
    assert next_state_index(mask).tolist() == [[1, 4, 4, 4, -1, -1], [1, 2, -1, -1, -1, -1]]


def test_a_sequence_without_states_adds_zero_not_nan():
    loss = value_loss(VALUES, torch.zeros(1, 3), torch.zeros(1, 3), R, beta=0.1)
    assert loss.item() == 0.0


# --- golden cases from the released code -----------------------------------------------------------------------
def _golden_inputs():
    g = GOLDEN["inputs"]
    action = torch.tensor(g["action_mask"], dtype=torch.float)[:, 1:]
    ids = torch.tensor(g["ids"])
    return g, ids, action


def _run(case: str, states_key: str, kl: str):
    g, ids, action = _golden_inputs()
    states = torch.tensor(g[states_key], dtype=torch.float)[:, :-1]
    rewards = torch.tensor(g["rewards"])
    logits = torch.tensor(g["policy_logits"]).requires_grad_(True)
    values = torch.tensor(g["values"]).requires_grad_(True)
    raw = torch.log_softmax(logits[:, :-1], -1)
    ref_raw = torch.log_softmax(torch.tensor(g["ref_logits"])[:, :-1], -1)
    targets = ids[:, 1:, None]
    logps, ref_logps = raw.gather(-1, targets)[..., 0], ref_raw.gather(-1, targets)[..., 0]
    beta, kl_coef = g["beta"], g["kl_coef"]

    v_loss = value_loss(values, logratio_to_go(logps, ref_logps, action), states, rewards, beta)
    p_loss = policy_loss(logps, ref_logps, action, values, states, rewards, beta)
    per_token = exact_kl(raw, ref_raw) if kl == "exact" else k3_kl(logps, ref_logps)
    reg = kl_regularizer(per_token, action)
    total = p_loss + kl_coef * reg
    want = GOLDEN[case]
    assert v_loss.item() == pytest.approx(want["value_loss"], rel=1e-5)
    assert p_loss.item() == pytest.approx(want["policy_loss"], rel=1e-5)
    assert reg.item() == pytest.approx(want["kl"], rel=1e-5)
    assert total.item() == pytest.approx(want["actor_total"], rel=1e-5)
    grads = {
        "grad_values": torch.autograd.grad(v_loss, values, retain_graph=True)[0],
        "grad_policy_logits": torch.autograd.grad(p_loss, logits, retain_graph=True)[0],
        "grad_kl_logits": torch.autograd.grad(reg, logits, retain_graph=True)[0],
        "grad_total_logits": torch.autograd.grad(total, logits)[0],
    }
    for name, grad in grads.items():
        torch.testing.assert_close(grad, torch.tensor(want[name]), rtol=1e-4, atol=1e-7, msg=name)


def test_golden_token_level_with_exact_kl():  # train_oreo.sh: --dro_actor_loss --kl_reg 0.01 --unbiased_kl
    _run("token_level_exact_kl", "token_states", "exact")


def test_golden_token_level_with_k3_kl():  # the same without --unbiased_kl
    _run("token_level_k3_kl", "token_states", "k3")


def test_golden_step_level():  # dro_loss with --step_level and states at step starts (the paper's step-level OREO)
    _run("step_level_exact_kl", "step_states", "exact")


def test_golden_alfworld_script():  # train_oreo_alfworld.sh: --step_level --token_level_agent
    _run("step_code_on_token_states", "token_states", "exact")


# --- properties ------------------------------------------------------------------------------------------------
@st.composite
def batches(draw):
    b, t = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    floats = st.floats(-3, 3, allow_nan=False, width=32)
    tensor = lambda: torch.tensor(draw(st.lists(st.lists(floats, min_size=t, max_size=t), min_size=b, max_size=b)))  # noqa: E731
    bits = lambda: torch.tensor(draw(st.lists(st.lists(st.integers(0, 1), min_size=t, max_size=t), min_size=b, max_size=b)), dtype=torch.float)  # noqa: E731
    actions = bits()
    states = bits() * actions  # every state is a position whose next token is an action
    rewards = torch.tensor(draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=b, max_size=b)))
    return tensor(), tensor(), actions, states, rewards, draw(st.sampled_from([0.01, 0.03, 0.1, 1.0]))


@settings(max_examples=80, deadline=None)
@given(batches())
def test_zero_loss_when_the_value_is_the_soft_return(batch):
    logps, ref, actions, states, rewards, beta = batch
    soft_return = rewards[:, None] - beta * logratio_to_go(logps, ref, actions)  # Eq. 7
    assert value_loss(soft_return, logratio_to_go(logps, ref, actions), states, rewards, beta).item() == pytest.approx(0, abs=1e-9)
    assert policy_loss(logps, ref, actions, soft_return, states, rewards, beta).item() == pytest.approx(0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(batches(), st.integers(2, 7))
def test_kl_term_vanishes_when_policy_equals_reference(batch, vocab):
    logps, _, actions, _, _, _ = batch
    logits = torch.randn(*logps.shape, vocab, requires_grad=True)
    logprobs = torch.log_softmax(logits, -1)
    exact = kl_regularizer(exact_kl(logprobs, logprobs.detach()), actions)
    assert exact.item() == pytest.approx(0, abs=1e-6)
    (grad,) = torch.autograd.grad(exact, logits)
    assert grad.abs().max().item() < 1e-6  # a minimum, not only a zero
    assert kl_regularizer(k3_kl(logps, logps), actions).item() == 0


@settings(max_examples=60, deadline=None)
@given(batches())
@example((torch.zeros(2, 6), torch.tensor([[0, 0, 0, 0, 1.0, 2.7962], [0] * 6]),
          torch.tensor([[1.0, 0, 0, 0, 1, 1], [0] * 6]), torch.tensor([[1.0, 0, 0, 0, 1, 0], [0] * 6]),
          torch.tensor([1.0, 0.0]), 1.0))
def test_policy_gradient_flows_only_through_each_states_own_step(batch):
    logps, ref, actions, states, rewards, beta = batch
    soft_return = rewards[:, None] - beta * logratio_to_go(logps, ref, actions)
    for b, t in states.nonzero().tolist():  # state t and the next one, whose error is zero: only t's step moves
        following = [s for s in range(t + 1, states.size(1)) if states[b, s]]
        end = following[0] if following else states.size(1)
        one = torch.zeros_like(states)
        one[b, t] = 1
        values = torch.zeros_like(logps)
        if following:
            one[b, end] = 1
            values[b, end] = soft_return[b, end]
        x = logps.clone().requires_grad_(True)
        policy_loss(x, ref, actions, values, one, rewards, beta).backward()
        step = torch.zeros_like(states)
        step[b, t:end] = actions[b, t:end]
        # exactly 0 but for the next state's own error, which is 0 only up to float32 rounding: a few ulps of the
        # soft return's size (a hypothesis case with soft return 3.8 gave 1.2e-7, one ulp of 1.0)
        ulp = torch.finfo(torch.float32).eps * (1 + soft_return.abs().max().item())
        assert (x.grad[step == 0].abs() <= 8 * ulp).all()


@settings(max_examples=60, deadline=None)
@given(batches())
def test_value_loss_never_moves_the_policy(batch):
    logps, ref, actions, states, rewards, beta = batch
    x = logps.clone().requires_grad_(True)
    values = torch.zeros_like(logps, requires_grad=True)
    value_loss(values, logratio_to_go(x, ref, actions), states, rewards, beta).backward()
    assert x.grad is None or (x.grad == 0).all()
