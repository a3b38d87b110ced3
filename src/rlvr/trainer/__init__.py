"""Training recipes on shared building blocks.

    blocks:   policy.py (loading, reference, log-probs, served weights), rollout_client.py (server checks, rollouts,
              weight sync), batching.py (samples, micro-batches), loss.py, checkpoint.py, metrics.py,
              hf_overrides.py (every private transformers override), on_policy.py (the on-policy loop)
    recipes:  mt_grpo.py (MT-GRPO and relatives: group credit)
    entry:    recipes.py (the algorithms `rlvr train --algo` knows), run.py (`run_training`, the served dtype, the
              accelerate config for `--num-processes`), nodes.py (several machines: options, checks, the ranks'
              agreement at start; docs/multinode.md)

Names are imported on first use: verifiers' RL trainer pulls in deepspeed and liger, which the pure modules
(loss, batching, metrics) and their tests do not need.
"""

import importlib

_EXPORTS = {
    "ConfigError": "rlvr.trainer.config",
    "OnPolicyConfig": "rlvr.trainer.config",
    "MTGRPOConfig": "rlvr.trainer.config",
    "OnPolicyTrainer": "rlvr.trainer.on_policy",
    "MTGRPOTrainer": "rlvr.trainer.mt_grpo",
    "ResumeError": "rlvr.trainer.checkpoint",
    "ServerError": "rlvr.trainer.rollout_client",
    "ALGORITHMS": "rlvr.trainer.recipes",
    "build_config": "rlvr.trainer.recipes",
    "run_training": "rlvr.trainer.run",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlvr.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
