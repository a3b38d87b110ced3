"""OREO in the tabular tier: offline soft-Bellman learning (Wang et al. 2024, arXiv 2412.16145) of a softmax table
and a value table from a fixed dataset of episodes, through OREO's own loss functions (`rlvr.offline.losses`, the
ones the LLM recipe `rlvr.offline.oreo` calls).

One run (seed):

    data       D = updates x group_size episodes (the episodes an on-policy cell samples in all) played once by a
               behaviour policy: `uniform` (every valid action equally likely) or `mixed` (at each turn, with
               probability `mix` an optimal action for the outcome, from `tasks.solve`, else a uniform one). The
               paper trains on samples of an SFT policy, which sits between the two.
    tables     the policy: logits theta[x, a] per x = (state, turn), softmax over the state's actions, zeros at the
               start; the reference pi_ref: that initial (uniform) table, as OREO's reference is the policy it
               starts from; the value: V[x], zeros at the start (the released code zero-initialises the value head).
    positions  an episode is one sequence, one position per turn: state x_k, action a_k, logps = log pi(a_k | x_k),
               state_mask = action_mask = the episode's turns (token-level OREO with one token per turn, which is
               also the step-level loss with one step per turn); R = the outcome (OREO's sparse reward, Eq. 7: the
               turn rewards are not used).
    loss       value_loss (Eq. 8) + policy_loss (Eq. 9) + kl_coef * kl_regularizer(exact_kl) (the exact KL of the
               released scripts' --unbiased_kl), on the whole dataset each step; Adam with the paper's betas
               (0.9, 0.95) on both tables. The losses average over a run's episodes; the runs of a cell are
               stacked in one batch and the sum over runs is minimised, so each run gets its own loss's gradient
               (Adam is elementwise: the runs do not interact). No gradient clipping: a global norm would couple
               the runs.
    acting     after every step, three ways to act with what was learnt:
               `policy`  sample from the table (what the LLM recipe's final/ policy does);
               `greedy`  the table's most likely action;
               `value`   value-guided: the action with the highest expected next value,
                         sum_s' P(s' | s, a) V~(s', k + 1), V~ = the outcome where the episode ends, else the value
                         table. The tabular form of OREO's value-guided search (Sec. 4.4), which scores a candidate
                         step by V after it; it uses the task's transition probabilities, which an LLM search
                         replaces by sampling the step (the suite's replies are deterministic except in
                         `repeated_states`).

The curve of a run is the exact expected outcome (tabular.evaluate) of the chosen way of acting, as a fraction of the
optimum, after each of `steps` steps (index 0: before training), so its "updates" are gradient steps on a fixed
dataset, not on-policy updates.
"""

from __future__ import annotations

import time
import zlib

import numpy as np
import torch

from rlvr.offline.losses import exact_kl, kl_regularizer, logratio_to_go, policy_loss, value_loss
from rlvr.suite.tabular import (
    Batch,
    Compiled,
    Method,
    Run,
    Settings,
    collapsed,
    evaluate,
    oreo_options,
    policy,
    sample,
)
from rlvr.suite.tasks import solve

_MASKED = -1e9  # the log-probability of an action a state does not offer: exp() is 0, and 0 * (x - x) is 0


def optimal_table(c: Compiled) -> np.ndarray:
    """[S * T, A]: uniform over the optimal actions (for the outcome) of every reachable (state, turn), uniform over
    all valid actions elsewhere."""
    T = c.task.turns
    table = policy(c, np.zeros((1, c.n_states * T, c.n_actions)))[0]
    keys = [s.key for s in c.task.states]
    for (key, turn), best in solve(c.task, "outcome").policy.items():
        i = keys.index(key)
        row = np.array([a in best for a in c.task.states[i].actions] + [False] * (c.n_actions - len(
            c.task.states[i].actions)), float)
        table[i * T + turn] = row / row.sum()
    return table


def behaviour_table(c: Compiled, behaviour: str, mix: float) -> np.ndarray:
    uniform = policy(c, np.zeros((1, c.n_states * c.task.turns, c.n_actions)))[0]
    return uniform if behaviour == "uniform" else (1 - mix) * uniform + mix * optimal_table(c)


def log_softmax_table(c: Compiled, theta: torch.Tensor) -> torch.Tensor:
    """log pi over each (state, turn)'s valid actions, _MASKED elsewhere: theta [N, S * T, A] -> same shape."""
    mask = torch.from_numpy(np.repeat(c.valid, c.task.turns, axis=0))[None].expand_as(theta)
    logp = torch.log_softmax(theta.masked_fill(~mask, float("-inf")), -1)
    return torch.where(mask, logp, torch.full_like(logp, _MASKED))  # terminal rows: all masked, never used


def value_guided(c: Compiled, values: np.ndarray, log_ratio: np.ndarray) -> np.ndarray:
    """The deterministic policy [N, S * T, A] that takes, at every (s, k), the action with the highest learnt value
    after it (ties: the first action):

        sum_s' P(s' | s, a) V(s', k + 1)           where the episode goes on in s',
        V(s, k) + beta log pi/pi_ref(a | s, k)     where it ends (no state follows: the soft Bellman equation's
                                                   value of the action, Eq. 5 with the sparse reward, from the
                                                   same tables; the true outcome is never read).

    values [N, S * T]; log_ratio [N, S * T, A] = beta * log pi/pi_ref."""
    N, S, T, A = values.shape[0], c.n_states, c.task.turns, c.n_actions
    v = values.reshape(N, S, T)
    ends = c.terminal[:, None] | (np.arange(T) == T - 1)[None, :]  # [S', k]: the episode ends on reaching s' at k
    later = np.concatenate([v[:, :, 1:], np.zeros((N, S, 1))], -1)  # [N, S', k] = V(s', k + 1)
    going_on = np.einsum("sap,npk->nska", c.prob, np.where(ends[None], 0.0, later))
    p_end = np.einsum("sap,pk->ska", c.prob, ends.astype(float))  # probability that the episode ends
    ending = v[..., None] + log_ratio.reshape(N, S, T, A)
    return greedy(c, (going_on + p_end[None] * ending).reshape(N, S * T, A))


def greedy(c: Compiled, scores: np.ndarray) -> np.ndarray:
    """One-hot tables [N, S * T, A] on each row's highest score among the valid actions (terminal rows: all 0)."""
    mask = np.repeat(c.valid, c.task.turns, axis=0)[None]
    best = np.argmax(np.where(mask, scores, -np.inf), -1)
    return np.where(mask, np.eye(c.n_actions)[best], 0.0)


def positions(c: Compiled, data: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The dataset [N, D, T] in OREO's position layout, flattened to N * D sequences: the table row x = state * T +
    turn of each position, its action, the mask of real turns, and R (the outcome)."""
    N, D, T = data.states.shape
    x = data.states * T + np.arange(T)[None, None, :]
    live = np.arange(T)[None, None, :] < data.lengths[:, :, None]
    rows = torch.from_numpy(np.where(live, x, 0).reshape(N * D, T))
    return rows, torch.from_numpy(data.actions.reshape(N * D, T)), torch.from_numpy(live.reshape(N * D, T)).double(), \
        torch.from_numpy(data.outcomes.reshape(N * D)).double()


def oreo_loss(c: Compiled, theta: torch.Tensor, values: torch.Tensor, ref: torch.Tensor, rows: torch.Tensor,
              actions: torch.Tensor, live: torch.Tensor, rewards: torch.Tensor, beta: float,
              kl_coef: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The summed OREO loss of N runs: theta [N, S * T, A], values [N, S * T], ref [N, S * T, A] (log pi_ref);
    rows, actions, live [N * D, T] and rewards [N * D] from `positions` (run n owns sequences n * D .. n * D + D - 1)."""
    N = theta.shape[0]
    D = rows.shape[0] // N
    run = torch.arange(N).repeat_interleave(D)[:, None]  # [N * D, 1]
    logp = log_softmax_table(c, theta)
    logps = logp[run, rows, actions]  # [N * D, T]
    ref_logps = ref[run, rows, actions]
    v = values[run, rows]
    v_loss = value_loss(v, logratio_to_go(logps.detach(), ref_logps, live), live, rewards, beta)
    p_loss = policy_loss(logps, ref_logps, live, v, live, rewards, beta)
    kl = kl_regularizer(exact_kl(logp, ref)[run, rows], live)
    # each loss is a mean over the N * D sequences, i.e. the mean over runs of each run's own mean: times N, a sum
    total = N * (v_loss + p_loss + kl_coef * kl)
    return total, {"value": v_loss.item(), "policy": p_loss.item(), "kl": kl.item()}


def run_offline(c: Compiled, method: Method, seeds: int, settings: Settings) -> Run:
    """Train N runs of OREO on datasets of their own and return the curve of the method's way of acting (`select`).
    The data and training depend on the method without `select`, so the three ways of acting share them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tensors of ~10^5 numbers: one thread was 10x faster than two on a busy 2-core machine
    try:
        return _run(c, method, seeds, settings)
    finally:
        torch.set_num_threads(threads)


def _run(c: Compiled, method: Method, seeds: int, settings: Settings) -> Run:
    start = time.perf_counter()
    o = oreo_options(method)
    data_key = ",".join(f"{k}={v}" for k, v in sorted(o.items()) if k != "select")
    rng = np.random.default_rng([settings.seed, zlib.crc32(c.task.name.encode()), zlib.crc32(data_key.encode())])
    torch.manual_seed(0)  # nothing here draws from torch; fixed anyway
    T = c.task.turns
    behaviour = np.broadcast_to(behaviour_table(c, o["behaviour"], o["mix"]), (seeds, c.n_states * T, c.n_actions))
    data = sample(c, behaviour, settings.updates * settings.group_size, rng)
    rows, actions, live, rewards = positions(c, data)
    theta = torch.zeros((seeds, c.n_states * T, c.n_actions), dtype=torch.float64, requires_grad=True)
    values = torch.zeros((seeds, c.n_states * T), dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        ref = log_softmax_table(c, theta)
    optimizer = torch.optim.Adam([theta, values], lr=o["lr"], betas=(0.9, 0.95))
    curve = np.zeros((seeds, o["steps"] + 1))

    def acting() -> np.ndarray:
        pi = policy(c, theta.detach().numpy())
        if o["select"] == "greedy":
            return greedy(c, pi)
        if o["select"] == "value":
            log_ratio = o["beta"] * (log_softmax_table(c, theta) - ref).detach().numpy()
            return value_guided(c, values.detach().numpy(), log_ratio)
        return pi

    curve[:, 0] = evaluate(c, acting())[0] / c.optimum
    for step in range(o["steps"]):
        optimizer.zero_grad(set_to_none=True)
        loss, _ = oreo_loss(c, theta, values, ref, rows, actions, live, rewards, o["beta"], o["kl_coef"])
        loss.backward()
        optimizer.step()
        curve[:, step + 1] = evaluate(c, acting())[0] / c.optimum
    pi = acting()
    _, total, reach = evaluate(c, pi)
    return Run(method.label, curve, total, collapsed(c, pi, reach), time.perf_counter() - start)
