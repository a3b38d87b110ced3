"""Reference solutions as a trajectory dataset (rlvr.trajectories' layout, `rlvr collect`'s): the expert
data of the SFT baseline. Each row's prompt is the environment's own, its completion the reference solution, its
reward the environment's reward function applied to it, its steps one per line.

    python -m vf_arithmetic.expert runs/arithmetic-expert --split train -n 256
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlvr.io import atomic_write_text
from rlvr.trajectories import JSONL, Trajectory, segment, write_dataset
from vf_arithmetic import correct_answer, load_environment


def expert_trajectories(env, split: str = "train", num_examples: int = -1) -> list[Trajectory]:
    dataset = env.get_dataset(num_examples) if split == "train" else env.get_eval_dataset(num_examples)
    out = []
    for row in dataset:
        completion = [{"role": "assistant", "content": json.loads(row["info"])["solution"]}]
        reward = correct_answer(completion, row["answer"])
        out.append(Trajectory(example_id=int(row["example_id"]), prompt=list(row["prompt"]), completion=completion,
                              reward=reward, steps=segment(completion, "line"), segmentation="line",
                              answer=row["answer"], metrics={"correct_answer": reward}, task=row.get("task") or
                              "default", policy="reference-solution"))
    return out


def export_expert_dataset(env, out_dir: str | Path, split: str = "train", num_examples: int = -1) -> Path:
    trajectories = expert_trajectories(env, split, num_examples)
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / JSONL, "".join(json.dumps(t.to_record()) + "\n" for t in trajectories))
    write_dataset(trajectories, out_dir / "dataset")
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vf_arithmetic.expert", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--split", choices=("train", "eval"), default="train")
    parser.add_argument("-n", "--num-examples", type=int, default=-1)
    parser.add_argument("--env-args", default="{}", help="load_environment arguments as JSON")
    args = parser.parse_args(argv)
    out = export_expert_dataset(load_environment(**json.loads(args.env_args)), args.out_dir, args.split,
                                args.num_examples)
    print(f"{len((out / JSONL).read_text().splitlines())} reference solutions -> {out}")


if __name__ == "__main__":
    main()
