"""`rlvr collect`: N rollouts per prompt of any environment from a policy served by `rlvr serve`, saved as a
trajectory dataset (layout in rlvr.trajectories) for SFT, rejection sampling and OREO.

Resumable: every finished group (the N rollouts of one prompt) is appended to predictions.jsonl and fsynced; a
restarted collection skips the prompts whose group is complete and drops a group a crash left unfinished. The
settings that shape the data (environment, policy, N, sampling, seed) are kept in collect.json and must match on
resume.

Sampling is seeded like training's and evaluation's (`rlvr.seeding`, stream "collect"): every request carries a seed
derived from the collection's seed, the example, the rollout's number in its group and the turn, so the same seed
collects the same trajectories (on one machine and vLLM build; docs/architecture.md lists what seeding does not cover)
whatever the chunking or a resume. seed None: the server's unseeded sampling.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlvr.io import append_jsonl, atomic_write_json, atomic_write_text
from rlvr.rollouts import Rollout, group_by_example
from rlvr.seeding import seeded_rollouts
from rlvr.trajectories import (
    JSONL,
    Trajectory,
    TrajectoryError,
    from_record,
    read_jsonl,
    segment,
    write_dataset,
)

SETTINGS_FILE = "collect.json"


@dataclass(frozen=True)
class CollectSettings:
    env: str
    model: str
    env_args: dict[str, Any] = field(default_factory=dict)
    split: str = "train"
    num_examples: int = -1  # prompts (-1: all)
    rollouts_per_example: int = 4
    temperature: float = 1.0
    max_tokens: int = 256
    segmentation: str = "turn"
    prompts_per_request: int = 4  # prompts generated together (their groups are appended when they finish)
    success_threshold: float = 1.0  # a trajectory with reward >= this counts as a success in the summary
    seed: int | None = 0  # sampling seed (rlvr.seeding, stream "collect"); None: unseeded
    # the weights' dtype in the server the collection starts; None: vLLM's choice (bf16 for a float32 checkpoint on
    # CPU) or, with --endpoint, whatever that server holds
    dtype: str | None = None

    # what must match when a collection resumes (num_examples may grow; chunking and the summary do not matter)
    STREAM = ("env", "model", "env_args", "split", "rollouts_per_example", "temperature", "max_tokens",
              "segmentation", "seed", "dtype")

    def command(self, out_dir: str | Path) -> str:
        """The `rlvr collect` command line that makes this collection (for reports: how a dataset was made)."""
        import shlex

        return " ".join(["rlvr collect", "--env", self.env, "--model", shlex.quote(self.model),
                         "--env-args", shlex.quote(json.dumps(self.env_args)), "--split", self.split,
                         "-n", str(self.num_examples), "-r", str(self.rollouts_per_example),
                         "--temperature", str(self.temperature), "--max-tokens", str(self.max_tokens),
                         "--segmentation", self.segmentation,
                         *(["--unseeded"] if self.seed is None else ["--seed", str(self.seed)]),
                         *(["--dtype", self.dtype] if self.dtype else []),
                         "-o", shlex.quote(str(out_dir))])

    def sampling_args(self) -> dict[str, Any]:
        # token ids and logprobs are not stored, but RolloutClient checks that the server returns them
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "logprobs": True,
                "extra_body": {"return_token_ids": True}}


def from_rollout(rollout: Rollout, settings: CollectSettings, sample_index: int) -> Trajectory:
    """A scored rollout as a stored trajectory: printable messages, rewards, step segmentation."""
    from verifiers.utils.message_utils import messages_to_printable, sanitize_tool_calls

    completion = sanitize_tool_calls(messages_to_printable(rollout.completion))
    return Trajectory(
        example_id=rollout.example_id, prompt=sanitize_tool_calls(messages_to_printable(rollout.prompt)),
        completion=completion, reward=rollout.outcome, steps=segment(completion, settings.segmentation),
        segmentation=settings.segmentation, answer=rollout.answer,
        turn_rewards=rollout.turn_rewards if rollout.turn_level else [], metrics=dict(rollout.metrics),
        error=rollout.error, task=rollout.task, policy=settings.model,
        sample_index=sample_index,
    )


def completed_groups(out_dir: Path, group_size: int) -> dict[int, list[dict]]:
    """The complete groups already on disk, by example id. An incomplete group (a crash mid-append) is removed
    from the file, which is rewritten atomically, so that its prompt is collected again in full."""
    path = out_dir / JSONL
    if not path.exists():
        return {}
    groups: dict[int, list[dict]] = {}
    for record, _ in read_jsonl(path):
        groups.setdefault(int(record["example_id"]), []).append(record)
    complete = {k: v for k, v in groups.items() if len(v) == group_size}
    if len(complete) != len(groups) or sum(map(len, groups.values())) != len(path.read_text().splitlines()):
        atomic_write_text(path, "".join(json.dumps(r, default=str) + "\n" for g in complete.values() for r in g))
    return complete


def check_settings(out_dir: Path, settings: CollectSettings) -> None:
    path = out_dir / SETTINGS_FILE
    if path.exists():
        saved = json.loads(path.read_text())
        diffs = [f"{k}: saved {saved.get(k)!r}, now {getattr(settings, k)!r}" for k in CollectSettings.STREAM
                 if saved.get(k) != getattr(settings, k)]
        if diffs:
            raise TrajectoryError(f"{out_dir} was collected with other settings ({'; '.join(diffs)}): resume with "
                                  "the same settings or collect into a new directory")
    atomic_write_json(path, {k: v for k, v in asdict(settings).items()})


def read_settings(out_dir: str | Path) -> CollectSettings | None:
    """How the trajectories in `out_dir` were collected, or None if `rlvr collect` did not make it."""
    path = Path(out_dir) / SETTINGS_FILE
    # collections made before sampling was seeded have no seed: they were unseeded
    return CollectSettings(**{"seed": None, **json.loads(path.read_text())}) if path.is_file() else None


@dataclass(frozen=True)
class GroupSummary:
    example_id: int
    rewards: list[float]
    turns: list[int]
    errors: int


def collect(env, client, settings: CollectSettings, out_dir: str | Path,
            on_group: Callable[[GroupSummary], None] | None = None) -> list[Trajectory]:
    """Collect the missing groups into `out_dir` with `client` (an unseeded RolloutClient: the collection seeds its
    requests from settings.seed), then write dataset/. Returns every trajectory of the directory (earlier runs'
    included)."""
    if getattr(client, "sampling_seed", None) is not None:
        raise ValueError("collect: pass an unseeded RolloutClient (sampling_seed=None); the collection seeds its "
                         "requests from CollectSettings.seed, which a seeded client would override")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    check_settings(out_dir, settings)
    dataset = (env.get_dataset(settings.num_examples) if settings.split == "train"
               else env.get_eval_dataset(settings.num_examples))
    done = completed_groups(out_dir, settings.rollouts_per_example)
    for records in done.values():
        if on_group:
            on_group(GroupSummary(int(records[0]["example_id"]), [float(r["reward"]) for r in records],
                                  [int(r["num_turns"]) for r in records], sum(r.get("error") is not None for r in records)))
    todo = [i for i, example_id in enumerate(dataset["example_id"]) if int(example_id) not in done]
    for start in range(0, len(todo), settings.prompts_per_request):
        rows = dataset.select(todo[start: start + settings.prompts_per_request])
        with seeded_rollouts(env, settings.seed, "collect"):
            generated = client.generate(env, rows, settings.rollouts_per_example)
        for group in group_by_example(generated.rollouts):
            trajectories = [from_rollout(r, settings, k) for k, r in enumerate(group)]
            for t in trajectories:
                append_jsonl(out_dir / JSONL, t.to_record())
            if on_group:
                on_group(GroupSummary(group[0].example_id, [r.outcome for r in group], [len(r.turns) for r in group],
                                      sum(r.error is not None for r in group)))
    trajectories = [from_record(r, where) for r, where in read_jsonl(out_dir / JSONL)]
    write_dataset(trajectories, out_dir / "dataset")
    return trajectories


def summary_rows(groups: list[GroupSummary], success_threshold: float) -> list[tuple[str, str]]:
    """The collection at a glance: (metric, value) rows with mean +/- standard error where it applies."""
    from rlvr.evaluation import mean_stderr

    rewards = [r for g in groups for r in g.rewards]
    success = [float(r >= success_threshold) for r in rewards]
    any_success = [float(any(r >= success_threshold for r in g.rewards)) for g in groups]
    all_success = [float(all(r >= success_threshold for r in g.rewards)) for g in groups]

    def fmt(values):
        s = mean_stderr(values)
        return f"{s.mean:.3f} +/- {s.stderr:.3f}" if s.n else "-"

    return [
        ("prompts", str(len(groups))), ("trajectories", str(len(rewards))),
        (f"success rate (reward >= {success_threshold:g})", fmt(success)),
        ("prompts with a success (pass@N)", fmt(any_success)),
        ("prompts with only successes", fmt(all_success)),
        ("mean reward", fmt(rewards)),
        ("assistant turns", fmt([t for g in groups for t in g.turns])),
        ("rollouts that ended in an error", str(sum(g.errors for g in groups))),
    ]
