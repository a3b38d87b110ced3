"""The suite's tabular tier: a softmax table per (state, turn), trained with each estimator's advantages computed by
the same `rlvr.credit` functions the trainer calls, over many independent seeds at once.

One update of one seed (a "run"): sample a group of G episodes of the task with the current table (one prompt = one
task instance), compute advantages with the method, and take one REINFORCE step (Williams 1992) on the logits:

    theta[x, .] += lr / G * sum over the group's turns (x, a) of A * (onehot(a) - pi(. | x))

(the gradient of A * log pi(a | x) for a softmax over the logits theta[x, .]; x = (state, turn)). Group estimators
(`rlvr.credit.ESTIMATORS`) get the group's turn rewards, outcomes, first tool-result turns and anchor-state keys;
PPO's GAE modes (`rlvr.credit.gae`) get each episode as positions (one assistant position per turn, the task's
environment-reply tokens as positions with turn index -1) with values from a tabular critic, their advantages are
whitened over the group's batch (`whiten`, as PPOTrainer does), and the critic table moves towards the estimate's
`returns` (one step of size `critic_lr` on the squared error, averaged over the visits of each entry).

Vectorised over seeds with numpy; the advantage functions are pure Python per group (they are what is tested), and
group estimators are memoised on their exact inputs (a deterministic function of them), which makes a converged run
cheap. The score of a table is computed exactly (a forward pass over the task's states), not sampled.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from rlvr.credit import ESTIMATORS, compute_advantages, estimate, estimator_parameters, token_rewards, whiten
from rlvr.credit.estimators import is_import_path
from rlvr.credit.gae import GAE_ESTIMATORS
from rlvr.suite.tasks import Task, solve

GAE_PREFIX = "ppo/"
# PPOConfig's defaults (rlvr.trainer.ppo: RAGEN's), without the KL penalty (the table has no reference policy).
GAE_DEFAULTS = {"gamma": 1.0, "lam": 1.0, "turn_gamma": 0.95, "turn_lam": 0.95, "turn_weight": 0.0,
                "returns": "gae", "value_loss_on_env_tokens": False}
OREO = "oreo"
# The offline cells (rlvr.suite.offline): behaviour policy of the dataset, OREO's beta and KL weight (the released
# math script's, train_oreo.sh), Adam's step size on the tables, gradient steps, and how the learnt tables act.
OREO_DEFAULTS = {"behaviour": "uniform", "mix": 0.5, "beta": 0.03, "kl_coef": 0.01, "lr": 0.1, "steps": 100,
                 "select": "policy"}
OREO_ACTING = ("policy", "greedy", "value")
OREO_BEHAVIOURS = ("uniform", "mixed")
_SUBOPTIMAL_GAP = 1e-9


@dataclass(frozen=True)
class Method:
    """A way of computing advantages, written `name` or `name:key=value,key=value`.

    Group estimators by their registry name (`mt_grpo_k:unreached=zero`) or, written outside rlvr, by their import
    path (`my_credit.estimators.mine:coef=0.5`, rlvr.credit.get_estimator); PPO's GAE modes as `ppo/<mode>`
    (`ppo/bi_level:returns=turn_gae`), with PPOConfig's defaults for what is not given; OREO from a fixed dataset
    as `oreo` (`oreo:behaviour=mixed,select=value`; rlvr.suite.offline)."""

    label: str
    name: str
    params: tuple[tuple[str, object], ...] = ()

    @property
    def is_gae(self) -> bool:
        return self.name.startswith(GAE_PREFIX)

    @property
    def is_offline(self) -> bool:
        return self.name == OREO

    @property
    def options(self) -> dict[str, object]:
        return dict(self.params)


def parse_method(spec: str) -> Method:
    name, _, rest = spec.partition(":")
    params = []
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            raise ValueError(f"method {spec!r}: {item!r} is not key=value")
        params.append((key.strip(), _value(raw.strip())))
    if name.startswith(GAE_PREFIX):
        mode = name[len(GAE_PREFIX):]
        if mode not in GAE_ESTIMATORS:
            raise ValueError(f"method {spec!r}: unknown GAE mode {mode!r}; choose one of {GAE_ESTIMATORS}")
        unknown = sorted({k for k, _ in params} - set(GAE_DEFAULTS))
    elif name == OREO:
        unknown = sorted({k for k, _ in params} - set(OREO_DEFAULTS))
    elif name in ESTIMATORS or is_import_path(name):  # an estimator of your own: my_credit.estimators.mine
        unknown = sorted({k for k, _ in params} - set(estimator_parameters(name)) - {"state_keys"})
    else:
        raise ValueError(f"unknown method {name!r}: an estimator of rlvr.credit.ESTIMATORS ({sorted(ESTIMATORS)}) "
                         f"or one of your own by its import path (my_credit.estimators.mine), ppo/<mode> with mode "
                         f"in {GAE_ESTIMATORS}, or {OREO} (offline)")
    if unknown:
        raise ValueError(f"method {spec!r}: {name} has no parameter(s) {unknown}")
    method = Method(spec, name, tuple(params))
    if method.is_offline:
        oreo_options(method)
    return method


def oreo_options(m: Method) -> dict:
    """An `oreo` method's settings, OREO_DEFAULTS for what it does not give, checked."""
    o = {**OREO_DEFAULTS, **m.options}
    if o["behaviour"] not in OREO_BEHAVIOURS or o["select"] not in OREO_ACTING:
        raise ValueError(f"method {m.label!r}: behaviour must be one of {OREO_BEHAVIOURS} and select one of "
                         f"{OREO_ACTING}")
    if not (0.0 <= o["mix"] <= 1.0 and o["beta"] > 0 and o["kl_coef"] >= 0 and o["lr"] > 0
            and isinstance(o["steps"], int) and o["steps"] >= 1):
        raise ValueError(f"method {m.label!r}: need 0 <= mix <= 1, beta > 0, kl_coef >= 0, lr > 0 and an integer "
                         "steps >= 1")
    return o


def _value(raw: str) -> object:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return float(raw) if any(c in raw for c in ".e") else int(raw)
    except ValueError:
        return raw


@dataclass(frozen=True)
class Settings:
    updates: int = 100
    group_size: int = 8
    lr: float = 1.0  # the table's step size on normalised advantages
    critic_lr: float = 0.5  # the tabular critic's step size (GAE modes)
    seed: int = 0


@dataclass(frozen=True)
class Compiled:
    """A task as arrays. States are indexed in the task's order, x = state * turns + turn indexes the tables."""

    task: Task
    n_states: int
    n_actions: int
    valid: np.ndarray  # [S, A] bool
    terminal: np.ndarray  # [S] bool
    outcome: np.ndarray  # [S]
    next_state: np.ndarray  # [S, A, B] (branches padded with the last one, probability 0)
    cum_prob: np.ndarray  # [S, A, B]
    reward: np.ndarray  # [S, A, B]
    result: np.ndarray  # [S, A, B] bool
    prob: np.ndarray  # [S, A, S'] transition probabilities
    mean_reward: np.ndarray  # [S, A] expected turn reward
    suboptimal: np.ndarray  # [S, T, A] bool: Q*(s, t, a) < V*(s, t) for the outcome (False where unreachable)
    optimum: float  # the optimal expected outcome


def compile_task(task: Task) -> Compiled:
    keys = [s.key for s in task.states]
    index = {k: i for i, k in enumerate(keys)}
    S, A = len(keys), task.max_actions
    B = max(len(task.branches(s.key, a)) for s in task.states for a in s.actions)
    valid = np.zeros((S, A), bool)
    next_state = np.zeros((S, A, B), np.int64)
    cum = np.ones((S, A, B))
    reward = np.zeros((S, A, B))
    result = np.zeros((S, A, B), bool)
    prob = np.zeros((S, A, S))
    for i, s in enumerate(task.states):
        for a, name in enumerate(s.actions):
            valid[i, a] = True
            branches = task.branches(s.key, name)
            padded = list(branches) + [branches[-1]] * (B - len(branches))
            c = np.cumsum([b.prob for b in branches] + [0.0] * (B - len(branches)))
            for j, b in enumerate(padded):
                next_state[i, a, j], reward[i, a, j], result[i, a, j] = index[b.next_state], b.reward, b.result
            cum[i, a] = np.minimum(c, 1.0)
            cum[i, a, len(branches) - 1:] = 1.0  # round-off can leave the last cumulative below 1
            for b in branches:
                prob[i, a, index[b.next_state]] += b.prob
    mean_reward = np.einsum("sab,sab->sa", np.diff(np.concatenate([np.zeros((S, A, 1)), cum], -1), axis=-1), reward)
    solution = solve(task, "outcome")
    suboptimal = np.zeros((S, task.turns, A), bool)
    outcome = np.array([s.outcome for s in task.states])
    terminal = np.array([s.terminal for s in task.states])
    for (key, turn), best in solution.values.items():
        i = index[key]
        for a in range(len(task.states[i].actions)):
            ends = terminal | (turn + 1 == task.turns)
            future = np.where(ends, outcome, [solution.values.get((k, turn + 1), 0.0) for k in keys])
            suboptimal[i, turn, a] = prob[i, a] @ future < best - _SUBOPTIMAL_GAP
    return Compiled(task, S, A, valid, terminal, outcome, next_state, cum, reward, result, prob, mean_reward,
                    suboptimal, solution.value)


def policy(c: Compiled, theta: np.ndarray) -> np.ndarray:
    """Softmax over each (state, turn)'s valid actions: theta [N, S * T, A] -> probabilities of the same shape."""
    mask = np.repeat(c.valid, c.task.turns, axis=0)[None]
    shift = np.where(mask, theta, -np.inf).max(-1, keepdims=True)
    e = np.where(mask, np.exp(theta - np.where(np.isfinite(shift), shift, 0.0)), 0.0)  # terminal rows: all 0
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def evaluate(c: Compiled, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact expected outcome and expected total (turn rewards + outcome) of each table, and the probability of
    reaching each (state, turn): pi [N, S * T, A] -> ([N], [N], [N, S, T])."""
    N, S, T = pi.shape[0], c.n_states, c.task.turns
    p = pi.reshape(N, S, T, c.n_actions)
    mass = np.zeros((N, S))
    mass[:, c.task.states.index(c.task.state(c.task.start))] = 1.0
    reach = np.zeros((N, S, T))
    expected, total = np.zeros(N), np.zeros(N)
    for k in range(T):
        reach[:, :, k] = mass
        flow = mass[:, :, None] * p[:, :, k, :]  # [N, S, A]
        total += np.einsum("nsa,sa->n", flow, c.mean_reward)
        mass = np.einsum("nsa,sap->np", flow, c.prob)
        ends = c.terminal if k < T - 1 else np.ones(S, bool)
        expected += mass[:, ends] @ c.outcome[ends]
        mass = np.where(ends[None], 0.0, mass)
    return expected, total + expected, reach


@dataclass(frozen=True)
class Batch:
    """One group of G episodes per run: arrays [N, G, T] (turns beyond an episode's length are padding)."""

    states: np.ndarray  # int, the state each turn acted on
    actions: np.ndarray  # int
    rewards: np.ndarray  # turn rewards
    results: np.ndarray  # bool: the turn's reply was a tool result
    lengths: np.ndarray  # [N, G] number of turns
    outcomes: np.ndarray  # [N, G]


def sample(c: Compiled, pi: np.ndarray, group_size: int, rng: np.random.Generator) -> Batch:
    N, T, G = pi.shape[0], c.task.turns, group_size
    state = np.full((N, G), c.task.states.index(c.task.state(c.task.start)))
    alive = np.ones((N, G), bool)
    states = np.zeros((N, G, T), np.int64)
    actions = np.zeros((N, G, T), np.int64)
    rewards = np.zeros((N, G, T))
    results = np.zeros((N, G, T), bool)
    lengths = np.zeros((N, G), np.int64)
    rows = np.arange(N)[:, None]
    for k in range(T):
        probs = pi[rows, state * T + k]  # [N, G, A]
        a = (rng.random((N, G, 1)) >= np.cumsum(probs, -1)).sum(-1)
        a = np.minimum(a, c.n_actions - 1)
        a = np.where(c.valid[state, a], a, np.argmax(probs, -1))  # round-off past the last valid action
        b = (rng.random((N, G, 1)) >= c.cum_prob[state, a]).sum(-1)
        b = np.minimum(b, c.cum_prob.shape[-1] - 1)
        nxt = c.next_state[state, a, b]
        states[:, :, k] = np.where(alive, state, 0)
        actions[:, :, k] = np.where(alive, a, 0)
        rewards[:, :, k] = np.where(alive, c.reward[state, a, b], 0.0)
        results[:, :, k] = alive & c.result[state, a, b]
        lengths += alive
        state = np.where(alive, nxt, state)
        alive = alive & ~c.terminal[state]
    return Batch(states, actions, rewards, results, lengths, c.outcome[state])


# --------------------------------------------------------------------------------------------------- advantages


@lru_cache(maxsize=1 << 17)
def _group_advantages(name: str, params: tuple, turn_rewards: tuple, outcomes: tuple, first: tuple,
                      keys: tuple) -> tuple:
    adv = compute_advantages(name, turn_rewards, outcomes, first, state_keys=keys, **dict(params))
    return tuple(tuple(row) for row in adv)


def group_advantages(m: Method, batch: Batch) -> np.ndarray:
    """Advantages [N, G, T] from a registered group estimator, one call per run's group.

    Every estimator is permutation-equivariant in the group's rollouts (its statistics are sums over the group, in
    `math.fsum`, which is exact and order-free; tested), so the group is sorted before the memoised call and the
    result put back in order: a group that differs only in the order of its rollouts costs nothing."""
    N, G, T = batch.rewards.shape
    out = np.zeros((N, G, T))
    for n in range(N):
        lengths = batch.lengths[n].tolist()
        rollouts = []
        for g, k in enumerate(lengths):
            results = batch.results[n, g, :k].tolist()
            first = results.index(True) if True in results else None
            rollouts.append((tuple(batch.rewards[n, g, :k].tolist()), float(batch.outcomes[n, g]), first,
                             tuple(batch.states[n, g, :k].tolist())))
        order = sorted(range(G), key=lambda g: (rollouts[g][0], rollouts[g][1], rollouts[g][2] is None,
                                                rollouts[g][2] or 0, rollouts[g][3]))
        adv = _group_advantages(m.name, m.params, *zip(*(rollouts[g] for g in order), strict=True))
        for g, row in zip(order, adv, strict=True):
            out[n, g, : len(row)] = row
    return out


@dataclass(frozen=True)
class Layout:
    """One episode as positions: turn k's assistant position, then the reply to it (not after the last turn)."""

    turn_index: tuple[int, ...]
    keys: tuple[int, ...]  # the critic-table entry each position's value is read from
    turn_position: tuple[int, ...]  # the assistant position of each turn
    fitted: tuple[int, ...]  # the positions whose value the critic fits: assistant ones (all with env_values)


@lru_cache(maxsize=1 << 14)
def layout(turns: int, n_states: int, reply_tokens: tuple[int, ...], states: tuple[int, ...],
           env_values: bool = False) -> Layout:
    """Keys: (state, turn) -> state * turns + turn for an assistant position; the j-th token of the reply to turn k,
    in the state s' that turn led to -> a separate entry per (s', k, j) after the n_states * turns assistant ones."""
    width = max(reply_tokens) or 1
    turn_index, keys, turn_position = [], [], []
    for k, s in enumerate(states):
        turn_position.append(len(turn_index))
        turn_index.append(k)
        keys.append(s * turns + k)
        if k < len(states) - 1:
            base = n_states * turns + (states[k + 1] * turns + k) * width
            turn_index += [-1] * reply_tokens[k]
            keys += range(base, base + reply_tokens[k])
    fitted = tuple(i for i, k in enumerate(turn_index) if k >= 0 or env_values)
    return Layout(tuple(turn_index), tuple(keys), tuple(turn_position), fitted)


@lru_cache(maxsize=1 << 16)
def _token_rewards(turn_index: tuple[int, ...], turn_rewards: tuple[float, ...], outcome: float) -> list[float]:
    return token_rewards(turn_index, turn_rewards, outcome)


def critic_size(c: Compiled) -> int:
    return c.n_states * c.task.turns * (1 + (max(c.task.reply_tokens) or 1))


def gae_advantages(c: Compiled, m: Method, batch: Batch, values: np.ndarray, critic_lr: float) -> np.ndarray:
    """Advantages [N, G, T] from a GAE mode; moves `values` [N, critic_size] towards the estimate's returns."""
    o = {**GAE_DEFAULTS, **m.options}
    mode = m.name[len(GAE_PREFIX):]
    on_env = bool(o.pop("value_loss_on_env_tokens"))
    N, G, T = batch.rewards.shape
    out = np.zeros((N, G, T))
    rows, keys, errors = [], [], []
    for n in range(N):
        views, estimates = [], []
        for g in range(G):
            L = int(batch.lengths[n, g])
            view = layout(T, c.n_states, c.task.reply_tokens, tuple(batch.states[n, g, :L].tolist()), on_env)
            rewards = _token_rewards(view.turn_index, tuple(batch.rewards[n, g, :L].tolist()),
                                     float(batch.outcomes[n, g]))
            v = values[n, list(view.keys)]
            est = estimate(mode, rewards, v.tolist(), view.turn_index, **o)
            views.append(view)
            estimates.append(est)
            fit = list(view.fitted)
            rows += [n] * len(fit)
            keys += [view.keys[i] for i in fit]
            errors.append(np.asarray(est.returns)[fit] - v[fit])
        white = whiten([e.advantages for e in estimates], [v.turn_index for v in views])
        for g, view in enumerate(views):
            out[n, g, : len(view.turn_position)] = [white[g][p] for p in view.turn_position]
    # one step on 1/2 (V - target)^2 per table entry, averaged over its visits in this batch
    sums, counts = np.zeros_like(values), np.zeros_like(values)
    np.add.at(sums, (rows, keys), np.concatenate(errors))
    np.add.at(counts, (rows, keys), 1.0)
    values += critic_lr * np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    return out


# --------------------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class Run:
    """One method on one task over N seeds."""

    method: str
    curve: np.ndarray  # [N, updates + 1]: exact expected outcome / optimum after each update (index 0: start)
    total: np.ndarray  # [N]: expected turn rewards + outcome at the end
    collapsed: np.ndarray  # [N] bool: see `collapsed`
    seconds: float


def reinforce_step(c: Compiled, theta: np.ndarray, pi: np.ndarray, batch: Batch, adv: np.ndarray,
                   lr: float) -> None:
    """theta[n, x] += lr / G * sum_{g, k} A[n, g, k] * (onehot(a) - pi[n, x]), x = (state, turn) of turn k."""
    N, G, T = adv.shape
    live = np.arange(T)[None, None, :] < batch.lengths[:, :, None]
    n_idx = np.broadcast_to(np.arange(N)[:, None, None], (N, G, T))[live]
    x = (batch.states * T + np.arange(T)[None, None, :])[live]
    grad = -pi[n_idx, x] * adv[live][:, None]
    grad[np.arange(len(x)), batch.actions[live]] += adv[live]
    np.add.at(theta, (n_idx, x), (lr / G) * grad)


def collapsed(c: Compiled, pi: np.ndarray, reach: np.ndarray, *, min_reach: float = 0.01,
              min_prob: float = 0.99) -> np.ndarray:
    """A run has collapsed when some (state, turn) its policy reaches with probability >= min_reach puts
    probability >= min_prob on an action that is sub-optimal there (Q* < V* for the outcome): a near-deterministic,
    near-zero-entropy choice of a wrong action, from which the policy gradient (proportional to pi (1 - pi)) hardly
    moves it."""
    N, S, T = reach.shape
    p = pi.reshape(N, S, T, c.n_actions)
    wrong = (p >= min_prob) & c.suboptimal[None]
    return ((reach >= min_reach)[..., None] & wrong).any(axis=(1, 2, 3))


def run(c: Compiled, method: Method, seeds: int, settings: Settings) -> Run:
    start = time.perf_counter()
    rng = np.random.default_rng([settings.seed, zlib.crc32(c.task.name.encode()), zlib.crc32(method.label.encode())])
    T = c.task.turns
    theta = np.zeros((seeds, c.n_states * T, c.n_actions))
    values = np.zeros((seeds, critic_size(c))) if method.is_gae else None
    curve = np.zeros((seeds, settings.updates + 1))
    pi = policy(c, theta)
    curve[:, 0] = evaluate(c, pi)[0] / c.optimum
    for u in range(settings.updates):
        batch = sample(c, pi, settings.group_size, rng)
        if method.is_gae:
            adv = gae_advantages(c, method, batch, values, settings.critic_lr)
        else:
            adv = group_advantages(method, batch)
        reinforce_step(c, theta, pi, batch, adv, settings.lr)
        pi = policy(c, theta)
        curve[:, u + 1] = evaluate(c, pi)[0] / c.optimum
    _, total, reach = evaluate(c, pi)
    return Run(method.label, curve, total, collapsed(c, pi, reach), time.perf_counter() - start)
