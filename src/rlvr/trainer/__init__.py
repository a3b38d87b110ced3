"""MT-GRPO training on verifiers: MTGRPOConfig / MTGRPOTrainer (subclasses of verifiers' RLConfig / RLTrainer)
and `run_training`, the entry point the CLI calls.

Names are imported on first use: verifiers' RL trainer pulls in deepspeed and liger, which the pure modules
(loss, batching, metrics) and their tests do not need.
"""

import importlib

_EXPORTS = {
    "ConfigError": "rlvr.trainer.config",
    "MTGRPOConfig": "rlvr.trainer.config",
    "MTGRPOTrainer": "rlvr.trainer.trainer",
    "ServerError": "rlvr.trainer.sync",
    "run_training": "rlvr.trainer.run",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlvr.trainer' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
