"""PPO on the choice environment with tiny-random, as a script: test_ppo.py runs it in a subprocess to SIGKILL it.
Prints nothing the tests parse: they read the run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from choice_env import load_environment  # noqa: E402

from rlvr.trainer.ppo import PPOConfig  # noqa: E402
from rlvr.trainer.run import run_training  # noqa: E402


def config(run_dir: str, steps: int, save_steps: int = 1000, **overrides) -> PPOConfig:
    """The small, fast setting of the PPO tests: 2 prompts x 8 rollouts, 2 tokens per turn, tiny-random actor and
    critic (full fine-tuning: fast on this 2-layer model)."""
    settings = dict(
        output_dir=run_dir, max_steps=steps, save_steps=save_steps, seed=0,
        batch_size=16, rollouts_per_example=8, micro_batch_size=8,
        max_tokens_per_turn=2, max_seq_len=256, temperature=1.0,
        learning_rate=1e-3, critic_learning_rate=1e-3, use_lora=False, report_to="none", logging_steps=1,
        progress=False,
    )
    settings.update(overrides)
    return PPOConfig(**settings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--save-steps", type=int, default=1000)
    parser.add_argument("--gae", default="multi_turn")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    cfg = config(args.run_dir, args.steps, args.save_steps, gae=args.gae)
    run_training(load_environment(), "tiny-random", cfg, server_url=args.server, resume=args.resume)


if __name__ == "__main__":
    main()
