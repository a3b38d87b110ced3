"""rlvr's checkpoint writing and preemption without a rollout server, for the checkpoint fault tests: a transformers
Trainer with `TransformersOverrides` (staged checkpoints published by rename, rlvr_state.json, the disk-full stop) and
the `Preemption` callback, training tiny-random on fixed token rows. Run in a subprocess, to be signalled mid-write
or given a full disk.

--stall-at N:UNTIL (repeatable): once checkpoint-N's files are in its staging directory (before it is published),
write RUN/writing-N and wait until UNTIL: `signal` (a signal was handled), `go` (the test wrote RUN/go-N) or
`killed` (at most 120 s). That is the test's moment to strike mid-write.
Each trained step appends its number and the first row of its batch to RUN/steps.jsonl.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

from rlvr.models import model_path
from rlvr.trainer.checkpoint import CheckpointWriteError, RunState, newest_checkpoint
from rlvr.trainer.faults import Preemption, resume_command

ROWS = 64
BATCH = 4


class Rows(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.arange(8) + 10 * i
        return {"input_ids": ids, "labels": ids}


class StepLog(TrainerCallback):
    """Which rows each step trained on, read back by the test (the resumed run must train the next batch)."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "steps.jsonl"
        self.first_rows: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        with self.path.open("a") as f:
            f.write(json.dumps({"step": state.global_step, "first_rows": self.first_rows}) + "\n")
        self.first_rows = []


def trainer_class():
    from rlvr.trainer.hf_overrides import TransformersOverrides

    class CheckpointedTrainer(TransformersOverrides, Trainer):
        def __init__(self, *args, stalls: dict[int, str], preemption: Preemption, steps: StepLog, **kwargs):
            super().__init__(*args, **kwargs)
            self._metrics = {"train": defaultdict(list)}
            self.stalls, self.preemption, self.steps = stalls, preemption, steps

        def training_step(self, model, inputs, *args, **kwargs):
            self.steps.first_rows.append(int(inputs["input_ids"][0, 0]) // 10)
            return super().training_step(model, inputs, *args, **kwargs)

        def run_state(self) -> RunState:
            step = self.state.global_step
            return RunState(global_step=step, next_batch_index=step, next_example_ids=[], seed=0, batch_size=BATCH,
                            rollouts_per_example=1, num_iterations=1, dataset_size=ROWS, dataset_fingerprint="rows",
                            config={})  # fmt: skip

        def close(self) -> None:
            pass

        def save_extra_state(self, checkpoint_dir: Path) -> None:
            step, run_dir = self.state.global_step, Path(self.args.output_dir)
            until = self.stalls.get(step)
            if until is None:
                return
            (run_dir / f"writing-{step}").write_text(str(checkpoint_dir))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (until == "signal" and self.preemption.received
                                                       or until == "go" and (run_dir / f"go-{step}").exists()):
                time.sleep(0.05)

    return CheckpointedTrainer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--stall-at", action="append", default=[], help="N:signal, N:go or N:killed")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    run_dir = Path(args.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_path("tiny-random"), torch_dtype=torch.float32)
    training = TrainingArguments(output_dir=str(run_dir), max_steps=args.steps, per_device_train_batch_size=BATCH,
                                 save_steps=1, logging_steps=1, report_to=[], learning_rate=1e-3, seed=0,
                                 use_cpu=True, disable_tqdm=True, save_only_model=False)  # fmt: skip
    steps = StepLog(run_dir)
    trainer = trainer_class()(model=model, args=training, train_dataset=Rows(), callbacks=[steps],
                              stalls={int(n): until for n, until in (a.split(":") for a in args.stall_at)},
                              preemption=None, steps=steps)
    preemption = trainer.preemption = Preemption(trainer.accelerator, num_iterations=1)
    trainer.add_callback(preemption)
    checkpoint = newest_checkpoint(run_dir) if args.resume else None
    try:
        with preemption.signals():
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except CheckpointWriteError as err:
        sys.exit(f"rlvr: {err}")
    if preemption.stopped_at is not None:
        raise preemption.preempted(resume_command(run_dir))


if __name__ == "__main__":
    main()
