"""Turn-level advantage estimators for one group (the rollouts of one prompt).

Every estimator maps
    turn_rewards[i][k]     reward of assistant turn k of rollout i (one entry per assistant turn),
    outcome_rewards[i]     the rollout's outcome reward,
    first_result_turn[i]   index of the first assistant turn whose environment reply was a tool result, or None,
to advantages[i][k], one per assistant turn. Pure functions: no verifiers, no torch.

Indexing: turns are 0-based here; the papers write them 1-based (turn k here is turn k+1 there). A rollout
with K assistant turns has turns 0..K-1, and its outcome arrives with its last turn K-1.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.credit.normalize import EPSILON, group_normalize

UNREACHED = ("exclude", "zero")


def _norm(values: Sequence[float], params: dict) -> list[float]:
    return group_normalize(values, norm=params["norm"], eps=params["eps"], std_floor=params["std_floor"])


def _broadcast(per_rollout: Sequence[float], turn_rewards: Sequence[Sequence[float]]) -> list[list[float]]:
    return [[a] * len(turns) for a, turns in zip(per_rollout, turn_rewards, strict=True)]


def grpo(turn_rewards, outcome_rewards, first_result_turn, *, norm="std", eps=EPSILON, std_floor=None):
    """GRPO-OR: A = norm(R_outcome) on every turn.

    MT-GRPO paper's code with `no_turn_reward=True`: advantages = outcome_advantages
    (verifiers/trainers/grpo_env_trainer.py, _generate_and_score_completions).
    """
    p = dict(norm=norm, eps=eps, std_floor=std_floor)
    return _broadcast(_norm(outcome_rewards, p), turn_rewards)


def grpo_mr(turn_rewards, outcome_rewards, first_result_turn, *, norm="std", eps=EPSILON, std_floor=None):
    """GRPO-MR: A = norm(R_outcome + sum_k r_k) on every turn (the trajectory-level "merged reward").

    grpo_env_trainer.py: advantages = combined_advantages, combined = turn + outcome reward functions, weighted.
    """
    p = dict(norm=norm, eps=eps, std_floor=std_floor)
    combined = [math.fsum(t) + o for t, o in zip(turn_rewards, outcome_rewards, strict=True)]
    return _broadcast(_norm(combined, p), turn_rewards)


def mt_grpo(
    turn_rewards,
    outcome_rewards,
    first_result_turn,
    *,
    coef: float = 1.0,
    coef_on: str = "turn",
    norm="std",
    eps=EPSILON,
    std_floor=None,
):
    """MT-GRPO (arXiv 2505.11821) as its original code computes it.

    Source: SiliangZeng/Multi-Turn-RL-Agent, verifiers/trainers/mt_grpo_env_trainer.py, `_assign_advantages`
    with advantage_est="aae" (and verl-tool's port, verl_tool/recipe/mt_grpo/mt_grpo_core_algos.py):
        A_turn = norm(R_turn), R_turn = sum of turn rewards          (the trajectory's turn reward)
        A_out  = norm(R_outcome)
        A_comb = norm(R_turn + R_outcome)
        rollout with a tool result, turns k <= t (t = first_result_turn):  A_out + coef * A_turn
                                    turns k >  t:                         A_out
        rollout without a tool result, every turn:                        A_comb
    The code puts the split at the start of the environment message holding the first `<result>`, so the turn
    that *produced* that result (turn t) still gets the turn term: it is the turn being credited.
    All three normalisations run over the whole group, with and without tool results alike.

    coef_on="outcome" writes it as the paper's Eq. 5 does instead: turns k <= t get A_turn + coef * A_out.
    """
    if coef_on not in ("turn", "outcome"):
        raise ValueError(f"mt_grpo: coef_on must be 'turn' (original code) or 'outcome' (paper Eq. 5), got {coef_on!r}")
    p = dict(norm=norm, eps=eps, std_floor=std_floor)
    r_turn = [math.fsum(t) for t in turn_rewards]
    a_turn = _norm(r_turn, p)
    a_out = _norm(outcome_rewards, p)
    a_comb = _norm([t + o for t, o in zip(r_turn, outcome_rewards, strict=True)], p)
    out = []
    for i, turns in enumerate(turn_rewards):
        t = first_result_turn[i]
        if t is None:
            out.append([a_comb[i]] * len(turns))
            continue
        early = a_out[i] + coef * a_turn[i] if coef_on == "turn" else a_turn[i] + coef * a_out[i]
        out.append([early if k <= t else a_out[i] for k in range(len(turns))])
    return out


def ms_grpo(turn_rewards, outcome_rewards, first_result_turn, *, coef: float = 1.0, norm="std", eps=EPSILON, std_floor=None):
    """MS-GRPO, the precursor of MT-GRPO in the same authors' code.

    Source: SiliangZeng/Multi-Turn-RL-Agent, verifiers/trainers/ms_grpo_env_trainer.py, `_combine_advantages`:
        A_step = norm(R_turn), A_out = norm(R_outcome)
        rollout with a tool result, turns k <= t:  A_out + coef * A_step;   turns k > t:  A_out
        rollout without a tool result, every turn: A_out
    The only difference from `mt_grpo` is the last line (mt_grpo gives those rollouts norm(R_turn + R_outcome)).
    The original's `step_advantage_coe` defaults to 0, which makes it outcome-only GRPO; rlvr defaults to 1.0,
    the value of its MT-GRPO runs.
    """
    p = dict(norm=norm, eps=eps, std_floor=std_floor)
    a_turn = _norm([math.fsum(t) for t in turn_rewards], p)
    a_out = _norm(outcome_rewards, p)
    out = []
    for i, turns in enumerate(turn_rewards):
        t = first_result_turn[i]
        early = a_out[i] + coef * a_turn[i] if t is not None else a_out[i]
        out.append([early if t is not None and k <= t else a_out[i] for k in range(len(turns))])
    return out


def ms_po(turn_rewards, outcome_rewards, first_result_turn, *, gamma: float = 1.0, norm="std", eps=EPSILON, std_floor=None):
    """MS-PO, the cumulative variant of MT-GRPO.

    Source: mt_grpo_env_trainer.py, `_assign_advantages` with advantage_est="cae":
        cumulative = R_turn + discount_factor * R_outcome;  A_cum = norm(cumulative), A_out = norm(R_outcome)
        turns k <= t: A_cum;  turns k > t: A_out;  no tool result: A_cum on every turn.
    """
    p = dict(norm=norm, eps=eps, std_floor=std_floor)
    cumulative = [math.fsum(t) + gamma * o for t, o in zip(turn_rewards, outcome_rewards, strict=True)]
    a_cum = _norm(cumulative, p)
    a_out = _norm(outcome_rewards, p)
    out = []
    for i, turns in enumerate(turn_rewards):
        t = first_result_turn[i]
        out.append([a_cum[i] if t is None or k <= t else a_out[i] for k in range(len(turns))])
    return out


def _per_index_normalize(
    values: Sequence[Sequence[float]], p: dict, unreached: str
) -> list[list[float]]:
    """Normalise values[i][k] across rollouts i separately for every turn index k.

    unreached="exclude": the statistics of index k use only the rollouts that have an entry at k (the paper's
        "rollouts that reached turn k"); row i keeps its own length.
    unreached="zero": a rollout without an entry at k counts as 0 in the statistics of index k, and row i is
        returned at the group's full width: entry k of a rollout that never reached k is that 0, normalised
        ((0 - mean_k) / (std_k + eps)). Estimators that sum over later turn indices (mt_grpo_k) need those entries;
        estimators that only read a rollout's own turns (turn_return) cut the row back to its length.
    """
    if unreached not in UNREACHED:
        raise ValueError(f"unreached must be one of {UNREACHED}, got {unreached!r}")
    width = max((len(v) for v in values), default=0)
    out = [[0.0] * (width if unreached == "zero" else len(v)) for v in values]
    for k in range(width):
        if unreached == "exclude":
            members = [i for i, v in enumerate(values) if len(v) > k]
            column = [values[i][k] for i in members]
        else:
            members = list(range(len(values)))
            column = [v[k] if len(v) > k else 0.0 for v in values]
        for i, a in zip(members, _norm(column, p), strict=True):
            out[i][k] = a
    return out


def mt_grpo_k(
    turn_rewards,
    outcome_rewards,
    first_result_turn,
    *,
    alpha: float = 1.0,
    unreached: str = "exclude",
    norm="std",
    eps=EPSILON,
    std_floor=None,
):
    """MT-GRPO generalised to K turns (arXiv 2505.11821, Eq. 12):

        A_k = sum_{l=k}^{K-1} alpha^(l-k) * A^I_l + alpha^(K-k) * A^O          (1-based turns k = 1..K)

    A^I_l is the intermediate reward of turn l normalised within the group over the rollouts that reached turn l
    as an intermediate turn, A^O = norm(R_outcome). 0-based (this code), a rollout with K turns gives turn k:
        A_k = sum_{l=k}^{K-2} alpha^(l-k) * A^I_l + alpha^(K-1-k) * A^O,
    so its last turn gets A^O alone. In the paper the last turn's reward *is* the outcome; a turn reward the
    environment gives to the last turn (e.g. a format score) is therefore added to R_outcome before A^O.
    alpha = 0 leaves every intermediate turn with its own A^I_k and the last turn with A^O.

    unreached="exclude" (default, the paper): A^I_l over the rollouts that reached turn l as an intermediate turn,
    and the sum stops at the rollout's own last intermediate turn K-2.
    unreached="zero" (policy-controlled stopping, verl RFC #7244): the sum runs to the group's last intermediate
    index H-1 (H = max K - 1 over the group) for every rollout, an intermediate turn the rollout never took counting
    as reward 0, normalised against that index's statistics over the whole group:
        A_k = sum_{l=k}^{H-1} alpha^(l-k) * A^I_l + alpha^(K-1-k) * A^O,   A^I_l = norm_l(r_l or 0 over all rollouts).
    Why: with "exclude" the subtracted baseline sum_{l=k}^{K-2} alpha^(l-k) mean_l / std_l has as many terms as
    the rollout has turns, so it depends on the rollout's own decision to stop - an action-dependent baseline. RFC
    #7244 gives its closed form: a hidden -E[R_intermediate] on every "take another turn" decision. With a fixed
    horizon the baseline terms no longer depend on the rollout's length (exactly so for alpha = 1; for alpha < 1 the
    outcome term's weight alpha^(K-1-k) still does).
    """
    p = dict(norm=norm, eps=eps, std_floor=std_floor)
    intermediate = [list(t[:-1]) for t in turn_rewards]
    outcome = [o + (t[-1] if t else 0.0) for t, o in zip(turn_rewards, outcome_rewards, strict=True)]
    a_int = _per_index_normalize(intermediate, p, unreached)
    a_out = _norm(outcome, p)
    out = []
    for i, turns in enumerate(turn_rewards):
        K = len(turns)
        adv = []
        for k in range(K):
            # a_int[i] ends at K-2 ("exclude") or at the group's last intermediate index ("zero")
            future = math.fsum(alpha ** (j - k) * a_int[i][j] for j in range(k, len(a_int[i])))
            adv.append(future + alpha ** (K - 1 - k) * a_out[i])
        out.append(adv)
    return out


def _discounted_returns(turns: Sequence[float], outcome: float, gamma: float) -> list[float]:
    """G_k = sum_{l=k}^{K-1} gamma^(l-k) r_l + gamma^(K-1-k) R_outcome (0-based; the outcome arrives with turn K-1).

    Written backwards, G_{K-1} = r_{K-1} + R_outcome and G_k = r_k + gamma * G_{k+1} (Sutton & Barto, Eq. 3.9).
    """
    returns = [0.0] * len(turns)
    g = outcome
    for k in reversed(range(len(turns))):
        g = turns[k] + (g if k == len(turns) - 1 else gamma * g)
        returns[k] = g
    return returns


def turn_return(
    turn_rewards,
    outcome_rewards,
    first_result_turn,
    *,
    gamma: float = 1.0,
    unreached: str = "exclude",
    norm="std",
    eps=EPSILON,
    std_floor=None,
):
    """Discounted turn returns, normalised per turn index: A_k = norm_k(G_k).

    G_k as in `_discounted_returns`; the statistics of index k run over the group's rollouts (GTPO, arXiv 2511.14846,
    normalises returns per turn), with the `unreached` option of `_per_index_normalize`. Each turn's advantage has a
    single baseline term (the mean return at its index), so neither option makes the baseline depend on the
    rollout's own stopping turn; "zero" only adds the rollouts that had already stopped (return 0) to each index.
    """
    p = dict(norm=norm, eps=eps, std_floor=std_floor)
    returns = [_discounted_returns(t, o, gamma) for t, o in zip(turn_rewards, outcome_rewards, strict=True)]
    full = _per_index_normalize(returns, p, unreached)
    return [row[: len(g)] for row, g in zip(full, returns, strict=True)]


def gigpo(
    turn_rewards,
    outcome_rewards,
    first_result_turn,
    *,
    state_keys: Sequence[Sequence[Hashable]],
    gamma: float = 1.0,
    omega: float = 1.0,
    norm="std",
    eps=EPSILON,
    std_floor=None,
):
    """GiGPO's two-level advantage (Feng et al. 2025, arXiv 2505.10978, Sec. 3, Eq. 7-9): A = A^E + omega * A^S.

    A^E = norm(R(tau)) over the group, R(tau) = sum of turn rewards + R_outcome (episode-level group);
    A^S = norm(G_k) within each anchor-state group: all turns of the group's rollouts whose anchor-state key (one per
          turn, e.g. the page or observation the turn acted on) is equal, whatever their index (step-level group).
          A key seen once gives A^S = 0. G_k: the discounted turn return of `_discounted_returns`.
    """
    p = dict(norm=norm, eps=eps, std_floor=std_floor)
    returns = [_discounted_returns(t, o, gamma) for t, o in zip(turn_rewards, outcome_rewards, strict=True)]
    episode = _norm([math.fsum(t) + o for t, o in zip(turn_rewards, outcome_rewards, strict=True)], p)
    anchors: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
    for i, keys in enumerate(state_keys):
        for k, key in enumerate(keys):
            anchors[key].append((i, k))
    step = [[0.0] * len(t) for t in turn_rewards]
    for members in anchors.values():
        for (i, k), a in zip(members, _norm([returns[i][k] for i, k in members], p), strict=True):
            step[i][k] = a
    return [[episode[i] + omega * s for s in step[i]] for i in range(len(turn_rewards))]


@dataclass(frozen=True)
class Estimator:
    """An estimator and what it reads. Adding one to rlvr means writing its function above and one entry below; one
    of your own needs neither: name it by its import path (`get_estimator`)."""

    func: Callable[..., list[list[float]]]
    summary: str  # one line for `rlvr train --help` and the docs
    turn_level: bool = True  # reads turn rewards (False: the outcome reward alone is enough)
    anchor_states: bool = False  # needs one anchor-state key per turn (state_keys)


ESTIMATORS: dict[str, Estimator] = {
    "grpo": Estimator(grpo, "GRPO-OR: the outcome, group-normalised, on every turn", turn_level=False),
    "grpo_mr": Estimator(grpo_mr, "GRPO-MR: outcome + summed turn rewards as one trajectory reward"),
    "mt_grpo": Estimator(mt_grpo, "MT-GRPO: turn advantage up to the first tool result, outcome after"),
    "ms_grpo": Estimator(ms_grpo, "MS-GRPO: MT-GRPO's precursor (no tool result: outcome only)"),
    "ms_po": Estimator(ms_po, "MS-PO: cumulative turn + discounted outcome up to the first tool result"),
    "mt_grpo_k": Estimator(mt_grpo_k, "MT-GRPO for K turns (paper Eq. 12), per-turn-index normalisation"),
    "turn_return": Estimator(turn_return, "discounted turn returns normalised per turn index"),
    "gigpo": Estimator(gigpo, "GiGPO: episode advantage + anchor-state step advantage", anchor_states=True),
}
_INPUTS = ("turn_rewards", "outcome_rewards", "first_result_turn", "state_keys")


def estimator_parameters(name: str) -> dict[str, Any]:
    """The tunable parameters of an estimator and their defaults (its keyword-only arguments)."""
    func = get_estimator(name).func
    return {n: p.default for n, p in inspect.signature(func).parameters.items() if n not in _INPUTS}


def merge_params(name: str, environment: Mapping[str, Any], training: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters an estimator runs with: the training settings merged with an environment's defaults.

    The training settings are the single source of the algorithm; an environment may declare defaults that describe
    it (e.g. `unreached="zero"` when the agent decides when to stop). An environment default the estimator does not
    take is not for it and is left out; a training setting it does not take is an error; the same parameter with two
    different values is an error that names both, never a silent override.
    """
    accepted = estimator_parameters(name)
    unknown = sorted(set(training) - set(accepted))
    if unknown:
        raise ValueError(f"estimator {name!r} has no parameter(s) {unknown}; it takes {sorted(accepted)}")
    for key in set(training) & set(environment):
        if training[key] != environment[key]:
            raise ValueError(
                f"credit parameter {key!r}: the training configuration sets {training[key]!r} but the environment's "
                f"TurnRubric declares {environment[key]!r}; remove one of them (or make them agree)"
            )
    return {**{k: v for k, v in environment.items() if k in accepted}, **training}


def is_import_path(name: str) -> bool:
    """An estimator written outside rlvr is named by its import path (`my_credit.estimators.my_estimator`); the
    registry's names have no dot."""
    return "." in name and all(part.isidentifier() for part in name.split("."))


def get_estimator(name: str) -> Estimator:
    """A registered estimator by name, or one from outside rlvr by its import path: an `Estimator`, or a function
    with the estimators' signature `f(turn_rewards, outcome_rewards, first_result_turn, *, params...)` (taken as
    turn-level, without anchor states; wrap it in an `Estimator` to say otherwise)."""
    if name in ESTIMATORS:
        return ESTIMATORS[name]
    if not is_import_path(name):
        raise ValueError(f"unknown estimator {name!r}; choose one of {sorted(ESTIMATORS)}, or name one of your own "
                         "by its import path (my_credit.estimators.my_estimator)")
    return _imported(name)


@functools.cache
def _imported(path: str) -> Estimator:
    module, _, attribute = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"estimator {path!r}: cannot import it ({type(err).__name__}: {err}); the module must be "
                         "importable from here (pip install -e your package, or put its folder on PYTHONPATH)") from err
    if isinstance(found, Estimator):
        return found
    if not callable(found):
        raise ValueError(f"estimator {path!r} is a {type(found).__name__}, not a function or an rlvr.credit.Estimator")
    summary = (inspect.getdoc(found) or path).splitlines()[0]
    return Estimator(found, summary)


def compute_advantages(
    estimator: str,
    turn_rewards: Sequence[Sequence[float]],
    outcome_rewards: Sequence[float],
    first_result_turn: Sequence[int | None],
    *,
    state_keys: Sequence[Sequence[Hashable]] | None = None,
    **params,
) -> list[list[float]]:
    """Advantages for one group: `advantages[i][k]` for assistant turn k of rollout i.

    `params` go to the estimator (e.g. coef, gamma, alpha, omega, unreached, norm, eps, std_floor); an unknown
    name is an error rather than silently ignored. `state_keys` (one anchor-state key per turn) are read by the
    estimators that group by anchor state (gigpo) and ignored by the others.
    """
    spec = get_estimator(estimator)
    _validate(turn_rewards, outcome_rewards, first_result_turn, state_keys)
    turn_rewards = [[float(r) for r in t] for t in turn_rewards]
    outcome_rewards = [float(o) for o in outcome_rewards]
    accepted = estimator_parameters(estimator)
    unknown = set(params) - set(accepted)
    if unknown:
        raise TypeError(
            f"compute_advantages({estimator!r}): unknown parameter(s) {sorted(unknown)}; it accepts {sorted(accepted)}"
        )
    if spec.anchor_states:
        if state_keys is None:
            raise ValueError(
                f"estimator {estimator!r} groups turns by anchor state and needs one state key per turn "
                "(an environment sets step['extras']['state_key'], as vf-webshop and vf-alfworld do)"
            )
        params["state_keys"] = state_keys
    return spec.func(turn_rewards, outcome_rewards, first_result_turn, **params)


def _validate(turn_rewards, outcome_rewards, first_result_turn, state_keys) -> None:
    n = len(turn_rewards)
    if len(outcome_rewards) != n or len(first_result_turn) != n:
        raise ValueError(
            f"compute_advantages: one entry per rollout is needed in each input, got {n} turn_rewards, "
            f"{len(outcome_rewards)} outcome_rewards, {len(first_result_turn)} first_result_turn"
        )
    if state_keys is not None and len(state_keys) != n:
        raise ValueError(f"compute_advantages: {len(state_keys)} state_keys lists for {n} rollouts")
    for i, (turns, t) in enumerate(zip(turn_rewards, first_result_turn, strict=True)):
        for k, r in enumerate(turns):
            if not math.isfinite(float(r)):
                raise ValueError(f"compute_advantages: turn_rewards[{i}][{k}] is {r!r}; rewards must be finite")
        if not math.isfinite(float(outcome_rewards[i])):
            raise ValueError(f"compute_advantages: outcome_rewards[{i}] is {outcome_rewards[i]!r}; must be finite")
        if t is not None and not (isinstance(t, int) and 0 <= t < len(turns)):
            raise ValueError(
                f"compute_advantages: first_result_turn[{i}] = {t!r} but rollout {i} has {len(turns)} turns; "
                "give the index of an existing assistant turn (0-based) or None when no tool result came back"
            )
        if state_keys is not None and len(state_keys[i]) != len(turns):
            raise ValueError(
                f"compute_advantages: state_keys[{i}] has {len(state_keys[i])} keys for {len(turns)} turns; "
                "give one anchor-state key per assistant turn"
            )
