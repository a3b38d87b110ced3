"""MT-GRPO or PPO on the choice environment with tiny-random, as a script: the training tests run it in a subprocess
(to SIGKILL it, or under `accelerate launch` with two processes). Prints nothing the tests parse: they read the
run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from choice_env import load_environment  # noqa: E402

from rlvr.trainer import MTGRPOConfig, run_training  # noqa: E402
from rlvr.trainer.ppo import PPOConfig  # noqa: E402

# The small, fast setting every training test starts from: 2 prompts x 8 rollouts, 2 tokens per turn.
SMALL = dict(seed=0, batch_size=16, rollouts_per_example=8, micro_batch_size=8, max_tokens_per_turn=2,
             max_seq_len=256, temperature=1.0, report_to="none", logging_steps=1, progress=False)


def config(run_dir: str, steps: int, save_steps: int = 1000, lora: bool = False, config_class=MTGRPOConfig,
           **overrides) -> MTGRPOConfig:
    settings = dict(SMALL, output_dir=run_dir, max_steps=steps, save_steps=save_steps,
                    learning_rate=2e-3 if lora else 1e-3, use_lora=lora, lora_rank=8)
    return config_class(**{**settings, **overrides})


def ppo_config(run_dir: str, steps: int, save_steps: int = 1000, **overrides) -> PPOConfig:
    """Actor and critic fully fine-tuned: fast on this 2-layer model."""
    settings = dict(SMALL, output_dir=run_dir, max_steps=steps, save_steps=save_steps,
                    learning_rate=1e-3, critic_learning_rate=1e-3, use_lora=False)
    return PPOConfig(**{**settings, **overrides})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--algo", choices=("mt_grpo", "ppo"), default="mt_grpo")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--save-steps", type=int, default=1000)
    parser.add_argument("--lora", action="store_true", help="mt_grpo only")
    parser.add_argument("--gae", default="multi_turn", help="ppo only")
    parser.add_argument("--async-steps", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    if args.algo == "ppo":
        cfg = ppo_config(args.run_dir, args.steps, args.save_steps, gae=args.gae, async_steps=args.async_steps)
    else:
        cfg = config(args.run_dir, args.steps, args.save_steps, args.lora, micro_batch_size=4,
                     async_steps=args.async_steps)
    run_training(load_environment(), "tiny-random", cfg, server_url=args.server, resume=args.resume)


if __name__ == "__main__":
    main()
