"""How many held-out rollouts a comparison of success rates needs, before it is run (pure functions).

Two models are evaluated on the same `units` (held-out goals, or goal x seed pairs), `k` rollouts each per unit;
the comparison is the mean over units of the per-unit difference of success fractions. Under a success rate `p` for
both, one unit's difference has variance 2 p (1 - p) / k (two independent binomial means) plus the variance of the
true per-unit differences (`between_sd`^2, 0 when the models differ by the same amount everywhere). The smallest
difference a two-sided test at `level` detects with probability `power` is the usual normal-approximation bound
(e.g. Chow, Shao and Wang, *Sample Size Calculations in Clinical Research*, 2nd ed., section 3.1, paired means):

    delta = (z_{(1 + level) / 2} + z_{power}) * sqrt(var / units)

The study's reported intervals (rlvr.study.stats) are t intervals on the data actually collected; this is for
choosing `[evaluation] rollouts` beforehand, and (`resolved_by`, the same bound from a pairing's measured standard
error) for the report's statement of what its pairings could resolve.
"""

from __future__ import annotations

import math
from statistics import NormalDist


def _z_sum(level: float, power: float) -> float:
    if not (0 < level < 1 and 0 < power < 1):
        raise ValueError(f"level and power are probabilities in (0, 1), got level={level}, power={power}")
    normal = NormalDist()
    return normal.inv_cdf((1 + level) / 2) + normal.inv_cdf(power)


def unit_variance(rate: float, rollouts_per_unit: int, between_sd: float = 0.0) -> float:
    """Variance of one unit's difference of two success fractions of `rollouts_per_unit` rollouts each."""
    if not 0 <= rate <= 1:
        raise ValueError(f"rate is a success rate in [0, 1], got {rate}")
    if rollouts_per_unit < 1:
        raise ValueError(f"rollouts per unit must be at least 1, got {rollouts_per_unit}")
    return 2 * rate * (1 - rate) / rollouts_per_unit + between_sd**2


def resolved_by(stderr: float, *, level: float = 0.95, power: float = 0.8) -> float:
    """The smallest difference a paired comparison with this standard error of its mean resolves (after the fact:
    the study report states it for the pairings it made)."""
    return _z_sum(level, power) * stderr


def detectable_difference(rate: float, rollouts_per_unit: int, units: int, *, level: float = 0.95,
                          power: float = 0.8, between_sd: float = 0.0) -> float:
    """The smallest success difference that `units` paired units of `rollouts_per_unit` rollouts resolve."""
    if units < 1:
        raise ValueError(f"units must be at least 1, got {units}")
    return resolved_by(math.sqrt(unit_variance(rate, rollouts_per_unit, between_sd) / units), level=level,
                       power=power)


def rollouts_for(difference: float, rate: float, units: int, *, level: float = 0.95, power: float = 0.8,
                 between_sd: float = 0.0) -> int | None:
    """The fewest rollouts per unit at which `difference` is detectable; None when no number of rollouts suffices
    (the spread of the true per-unit differences alone is too large for `units`)."""
    if difference <= 0:
        raise ValueError(f"the difference to detect must be positive, got {difference}")
    budget = units * (difference / _z_sum(level, power)) ** 2 - between_sd**2  # what the binomial part may take
    if budget <= 0:
        return None
    return max(1, math.ceil(2 * rate * (1 - rate) / budget - 1e-12))
