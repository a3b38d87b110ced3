"""The algorithms `rlvr train --algo` knows, each a configuration class and the recipe (trainer) it runs.

Group-credit estimators come from the `rlvr.credit` registry (adding an estimator there adds an algorithm here);
an estimator written outside rlvr is an algorithm by its import path (`--algo my_credit.estimators.mine`), trained
by the same recipe. A recipe with its own configuration registers one entry in `ALGORITHMS`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from rlvr.credit import ESTIMATORS, get_estimator
from rlvr.credit.estimators import is_import_path


@dataclass(frozen=True)
class Algorithm:
    config: str  # "module:Class" of its configuration (an OnPolicyConfig or another recipe's config)
    summary: str
    preset: dict[str, Any] = field(default_factory=dict)  # configuration fields the algorithm fixes


def _load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


ALGORITHMS: dict[str, Algorithm] = {
    name: Algorithm("rlvr.trainer.config:MTGRPOConfig", spec.summary, {"algo": name})
    for name, spec in ESTIMATORS.items()
}
ALGORITHMS["ppo"] = Algorithm(
    "rlvr.trainer.ppo:PPOConfig",
    "PPO with a learned critic and turn-level GAE (RAGEN); `gae`: token, multi_turn, bi_level, cross_level",
)

# Offline recipes (trained from a trajectory dataset: `rlvr train --algo X --dataset DIR`; rlvr.offline)
ALGORITHMS["sft"] = Algorithm("rlvr.offline.sft:SFTRecipeConfig",
                              "SFT on successful trajectories (expert data: SFT; the policy's own: rejection sampling)")
ALGORITHMS["oreo"] = Algorithm("rlvr.offline.oreo:OREOConfig",
                               "OREO: offline policy + value model by the soft Bellman equation (arXiv 2412.16145)")


def algorithm(name: str) -> Algorithm:
    """A registered algorithm, or a group-credit estimator of your own by its import path (rlvr.credit.get_estimator:
    a ValueError says why it does not import); KeyError for any other name."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if is_import_path(name):
        return Algorithm("rlvr.trainer.config:MTGRPOConfig", get_estimator(name).summary, {"algo": name})
    raise KeyError(name)


def config_class(algo: str):
    return _load(algorithm(algo).config)


def build_config(algo: str, options: dict[str, Any]):
    """The configuration of `algo` with the given options (field names of its configuration class)."""
    spec = algorithm(algo)
    clash = {k: v for k, v in options.items() if k in spec.preset and v != spec.preset[k]}
    if clash:
        from rlvr.trainer.config import ConfigError

        raise ConfigError(f"algo {algo!r} fixes {spec.preset}, but the options set {clash}")
    return config_class(algo)(**{**options, **spec.preset})


def trainer_class(config):
    """The recipe (trainer class) that trains with `config`."""
    return _load(type(config).trainer)
