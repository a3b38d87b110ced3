"""MT-GRPO on the choice environment with tiny-random, as a script: the training tests run it in a subprocess
(to SIGKILL it, or under `accelerate launch` with two processes). Prints nothing the tests parse: they read the
run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from choice_env import load_environment  # noqa: E402

from rlvr.trainer import MTGRPOConfig, run_training  # noqa: E402


def config(run_dir: str, steps: int, save_steps: int = 1000, lora: bool = False, **overrides) -> MTGRPOConfig:
    """The small, fast setting every training test starts from (2 prompts x 8 rollouts, 4 tokens per turn)."""
    settings = dict(
        output_dir=run_dir, max_steps=steps, save_steps=save_steps, seed=0,
        batch_size=16, rollouts_per_example=8, micro_batch_size=8,
        max_tokens_per_turn=2, max_seq_len=256, temperature=1.0,
        learning_rate=2e-3 if lora else 1e-3, use_lora=lora, lora_rank=8,
        report_to="none", logging_steps=1, progress=False,
    )
    settings.update(overrides)
    return MTGRPOConfig(**settings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--save-steps", type=int, default=1000)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    cfg = config(args.run_dir, args.steps, args.save_steps, args.lora, micro_batch_size=4)
    run_training(load_environment(), "tiny-random", cfg, server_url=args.server, resume=args.resume)


if __name__ == "__main__":
    main()
