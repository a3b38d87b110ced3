"""Group normalisation and batch whitening of rewards: the building blocks of every estimator.

Pure functions over Python floats (float64). The original implementations run the same formulas in float32
torch tensors, so they agree with these to about 1e-6 relative.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# (r - mean) / (std + 1e-4): the epsilon is *added to the std*, as in the MT-GRPO paper's code
# (SiliangZeng/Multi-Turn-RL-Agent, verifiers/trainers/grpo_env_trainer.py, _compute_normalized_advantages)
# and in verl-tool's port (TIGER-AI-Lab/verl-tool, verl_tool/recipe/mt_grpo/mt_grpo_core_algos.py, grpo_normalize).
EPSILON = 1e-4

NORMS = ("std", "none")


def group_normalize(
    values: Sequence[float],
    *,
    norm: str = "std",
    eps: float = EPSILON,
    std_floor: float | None = None,
) -> list[float]:
    """Normalise one group of scalars against its own statistics.

    norm="std": (x - mean) / (std + eps) with the *sample* std (n - 1 in the denominator), because the original
        code calls torch's `Tensor.std`, whose default is the unbiased estimator (grpo_env_trainer.py,
        `rewards.view(-1, G).std(dim=1)`).
    norm="none": x - mean, the Dr. GRPO choice (Liu et al. 2025, arXiv 2503.20783, Sec. 3.1: dividing by the std
        re-weights prompts by their difficulty).
    std_floor: when the group std is below it, only centre (no division). verl-tool's grpo_normalize does this
        with std_floor = 1e-4; the MT-GRPO paper's code does not (None, the default).

    A group of one, or a group whose values are all equal, gives exact zeros. The paper's code would give NaN for a
    group of one (torch's unbiased std of one element) and 0/(0 + 1e-4) = 0 for a constant group; verl-tool gives 0
    for both. Exact zeros (rather than float round-off such as 1e-17 / 1e-4) keep "no signal" meaning no update.
    """
    if norm not in NORMS:
        raise ValueError(f"group_normalize: unknown norm {norm!r}; use one of {NORMS}")
    _check_finite(values, "group_normalize")
    n = len(values)
    if n <= 1 or all(v == values[0] for v in values):
        return [0.0] * n
    mean = math.fsum(values) / n
    centred = [v - mean for v in values]
    if norm == "none":
        return centred
    std = math.sqrt(math.fsum(c * c for c in centred) / (n - 1))
    if std_floor is not None and std < std_floor:
        return centred
    return [c / (std + eps) for c in centred]


def batch_whiten(values: Sequence[float], weights: Sequence[float] | None = None, *, eps: float = 1e-8) -> list[float]:
    """Whiten advantages over a whole batch (all groups): (x - mean) / sqrt(var + eps).

    This is verl's `masked_whiten` (verl/utils/torch_functional.py), which verl-tool's MT-GRPO recipe applies to the
    token-level advantages after group normalisation (mt_grpo_core_algos.py, compute_mt_grpo_advantage_return).
    Its statistics are over tokens, so pass `weights` = the number of trained tokens of each value to reproduce it;
    the variance is the unbiased one with the weight total as the count, as in verl's `masked_var`.
    """
    _check_finite(values, "batch_whiten")
    w = [1.0] * len(values) if weights is None else [float(x) for x in weights]
    if len(w) != len(values):
        raise ValueError(f"batch_whiten: {len(values)} values but {len(w)} weights; give one weight per value")
    if any(x < 0 for x in w):
        raise ValueError("batch_whiten: weights are token counts and must be >= 0")
    total = math.fsum(w)
    if total <= 1:
        raise ValueError(f"batch_whiten: total weight {total} is too small to estimate a variance (need > 1)")
    mean = math.fsum(wi * v for wi, v in zip(w, values, strict=True)) / total
    var = math.fsum(wi * (v - mean) ** 2 for wi, v in zip(w, values, strict=True)) / total
    var *= total / (total - 1)  # verl masked_var: Bessel's correction with the mask sum as n
    scale = 1.0 / math.sqrt(var + eps)
    return [(v - mean) * scale for v in values]


def _check_finite(values: Sequence[float], where: str) -> None:
    for i, v in enumerate(values):
        if not math.isfinite(v):
            raise ValueError(f"{where}: value {i} is {v!r}; rewards must be finite numbers (check the reward functions)")
