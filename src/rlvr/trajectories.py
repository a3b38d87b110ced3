"""Trajectory datasets for offline training (SFT, rejection sampling, OREO): the on-disk layout, reading it with
clear errors, and the token view the trainers use.

Layout of a trajectory directory (written by `rlvr collect`; a superset of `rlvr predict`'s layout, so a predict
output or vf-alfworld's expert export is read as it is):

    predictions.jsonl   one JSON record per trajectory (appended group by group while collecting)
    dataset/            the same records as a Hugging Face dataset (`datasets.load_from_disk`); prompt,
                        completion, metrics and steps are JSON strings there, as in `rlvr predict`
    collect.json        how the trajectories were collected (`rlvr collect` only; checked when it resumes)

A record (fields of `rlvr predict` first, then those `rlvr collect` adds):

    example_id      int    the prompt's row in the environment's dataset; rollouts of one prompt share it
    prompt          list   chat messages before the first assistant turn ({"role", "content"[, "tool_calls"]})
    completion      list   the rest of the conversation: assistant turns and the environment's replies
    answer          str    the environment's reference answer
    num_turns       int    assistant turns
    turn_rewards    list   one reward per assistant turn (TurnRubric environments; [] otherwise)
    reward          float  the trajectory's reward (the rubric's outcome); OREO's R
    metrics         dict   every reward function's value
    stop_condition  str    why the rollout ended; error: str | null
    tools           list   optional: the tool schemas (OpenAI `{"type": "function", ...}`) the model was given,
                           rendered by the chat template with the prompt (a tool-calling environment's expert)
    --- added by rlvr collect ---
    steps           list   the step segmentation: [message index in `completion`, character offset in its
                           content] where each step starts; a step runs to the next step's start or the end of
                           its assistant turn. One step per assistant turn for agents ("turn"), one per line of
                           reasoning ("line": a step starts after every newline that is followed by more text)
    segmentation    str    "turn" or "line": how `steps` was made
    task            str    the environment's task name
    policy          str    the model that generated the trajectory
    sample_index    int    which of the prompt's N rollouts it is

Records without `steps` (a predict output, an expert export) are segmented when they are read, by the
segmentation the trainer is given ("turn" or "line"); without either the reader stops with an error saying so.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from datasets import Dataset

Segmentation = Literal["turn", "line"]
SEGMENTATIONS = ("turn", "line")
JSONL = "predictions.jsonl"
DATASET_DIR = "dataset"
JSON_COLUMNS = ("prompt", "completion", "metrics", "steps", "tools")


class TrajectoryError(ValueError):
    """A trajectory dataset that cannot be used as it is, with where and what to do."""


@dataclass(frozen=True)
class Trajectory:
    example_id: int
    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]]
    reward: float
    steps: tuple[tuple[int, int], ...]  # (completion message index, character offset in its content)
    segmentation: str
    answer: Any = ""
    turn_rewards: list[float] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    stop_condition: str | None = None
    error: str | None = None
    task: str = "default"
    policy: str | None = None
    sample_index: int = 0
    tools: list[dict[str, Any]] | None = None

    @property
    def num_turns(self) -> int:
        return sum(m.get("role") == "assistant" for m in self.completion)

    def to_record(self) -> dict[str, Any]:
        return {
            "example_id": self.example_id, "prompt": self.prompt, "completion": self.completion,
            "answer": self.answer, "num_turns": self.num_turns, "turn_rewards": list(self.turn_rewards),
            "reward": self.reward, "metrics": dict(self.metrics), "stop_condition": self.stop_condition,
            "error": self.error, "steps": [list(s) for s in self.steps], "segmentation": self.segmentation,
            "task": self.task, "policy": self.policy, "sample_index": self.sample_index, "tools": self.tools,
        }


def _text(content: Any) -> str:
    """A message's text (content parts joined, as the chat templates render them)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def segment(completion: Sequence[dict[str, Any]], segmentation: Segmentation) -> tuple[tuple[int, int], ...]:
    """Where the steps start: every assistant turn ("turn"), or every line of an assistant turn ("line": after each
    newline followed by more text; blank lines stay with the step before them)."""
    if segmentation not in SEGMENTATIONS:
        raise TrajectoryError(f"segmentation {segmentation!r} is not one of {SEGMENTATIONS}")
    steps = []
    for i, message in enumerate(completion):
        if message.get("role") != "assistant":
            continue
        steps.append((i, 0))
        if segmentation == "line":
            text = _text(message.get("content"))
            steps += [(i, c + 1) for c, ch in enumerate(text)
                      if ch == "\n" and text[c + 1: c + 2] != "\n" and text[c + 1:].strip()]
    return tuple(steps)


def _field(record: dict, name: str, where: str, kinds, hint: str = ""):
    if name not in record or record[name] is None:
        raise TrajectoryError(f"{where} has no {name!r}{hint}")
    value = record[name]
    if not isinstance(value, kinds):
        raise TrajectoryError(f"{where}: {name!r} is {type(value).__name__}, expected {kinds}")
    return value


def from_record(record: dict[str, Any], where: str, segmentation: Segmentation | None = None) -> Trajectory:
    """A stored record as a Trajectory, checked. `where` names it in errors (file and line)."""
    reward = _field(record, "reward", where, (int, float),
                    ": OREO and rejection sampling need each trajectory's reward. Collect with `rlvr collect` "
                    "(or `rlvr predict`), which scores every rollout with the environment's rubric")
    if math.isnan(float(reward)):
        raise TrajectoryError(f"{where}: reward is NaN; drop the record or score it again")
    prompt = _field(record, "prompt", where, list)
    completion = _field(record, "completion", where, list)
    if not any(m.get("role") == "assistant" for m in completion):
        raise TrajectoryError(f"{where}: the completion has no assistant message, so there is nothing to train on")
    steps = record.get("steps")
    if steps:
        steps = tuple((int(i), int(c)) for i, c in steps)
        for i, c in steps:
            if not (0 <= i < len(completion)) or completion[i].get("role") != "assistant":
                raise TrajectoryError(f"{where}: step ({i}, {c}) does not point at an assistant message")
        seg = record.get("segmentation") or "custom"
    elif segmentation is not None:
        steps, seg = segment(completion, segmentation), segmentation
    else:
        raise TrajectoryError(
            f"{where} has no step segmentation ('steps'): say how to segment it, segmentation='turn' (one step per "
            "assistant turn, agents) or 'line' (one step per line of reasoning, math); e.g. "
            "`rlvr train --algo oreo --set segmentation=line`"
        )
    return Trajectory(
        example_id=int(record.get("example_id", 0)), prompt=prompt, completion=completion, reward=float(reward),
        steps=steps, segmentation=seg, answer=record.get("answer", ""),
        turn_rewards=[float(x) for x in record.get("turn_rewards") or []],
        metrics={k: float(v) for k, v in (record.get("metrics") or {}).items()},
        stop_condition=record.get("stop_condition"), error=record.get("error"), task=record.get("task") or "default",
        policy=record.get("policy"), sample_index=int(record.get("sample_index", 0)), tools=record.get("tools") or None,
    )


def read_jsonl(path: Path) -> list[tuple[dict, str]]:
    """(record, where) pairs of a JSONL file; a last line cut short by a crash is ignored, any other bad line is an
    error."""
    lines = Path(path).read_text().splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append((json.loads(line), f"{path}:{n}"))
        except json.JSONDecodeError as err:
            if n == len(lines):
                break  # the line a SIGKILL cut in half
            raise TrajectoryError(f"{path}:{n} is not valid JSON ({err})") from err
    return out


def _dataset_records(path: Path) -> list[tuple[dict, str]]:
    from datasets import load_from_disk

    dataset = load_from_disk(str(path))
    records = []
    for n, row in enumerate(dataset):
        row = dict(row)
        for name in JSON_COLUMNS:
            if isinstance(row.get(name), str):
                row[name] = json.loads(row[name])
        records.append((row, f"{path}[{n}]"))
    return records


def load_trajectories(path: str | Path, segmentation: Segmentation | None = None) -> list[Trajectory]:
    """Every trajectory of a directory in the layout above (predictions.jsonl, else dataset/), a JSONL file, or a
    saved Hugging Face dataset."""
    path = Path(path)
    if path.is_dir() and (path / JSONL).is_file():
        raw = read_jsonl(path / JSONL)
    elif path.is_file():
        raw = read_jsonl(path)
    elif path.is_dir() and (path / DATASET_DIR).is_dir():
        raw = _dataset_records(path / DATASET_DIR)
    elif path.is_dir() and (path / "dataset_info.json").is_file():
        raw = _dataset_records(path)
    else:
        raise TrajectoryError(
            f"no trajectories at {path}: expected a directory with {JSONL} or {DATASET_DIR}/ (written by "
            "`rlvr collect` or `rlvr predict`), a JSONL file, or a saved Hugging Face dataset"
        )
    if not raw:
        raise TrajectoryError(f"{path} holds no trajectories")
    return [from_record(record, where, segmentation) for record, where in raw]


def successful(trajectories: list[Trajectory], min_reward: float | None) -> list[Trajectory]:
    """Those with reward >= min_reward (all of them for None): what SFT and rejection sampling imitate."""
    kept = [t for t in trajectories if min_reward is None or t.reward >= min_reward]
    if not kept:
        best = max(t.reward for t in trajectories)
        raise TrajectoryError(f"no trajectory has reward >= {min_reward} (the best has {best}): nothing to imitate. "
                              "Collect more, or lower min_reward")
    return kept


def write_dataset(trajectories: Sequence[Trajectory], out_dir: Path) -> Path:
    """The records as a Hugging Face dataset at `out_dir`, atomically (message lists as JSON strings, as
    `rlvr.evaluation.save_predictions` stores them: their shapes vary between rows)."""
    from datasets import Dataset

    from rlvr.io import atomic_directory

    rows = [{**r, **{k: json.dumps(r[k], default=str) for k in JSON_COLUMNS}}
            for r in (t.to_record() for t in trajectories)]
    with atomic_directory(Path(out_dir)) as tmp:
        Dataset.from_list(rows).save_to_disk(str(tmp))
    return Path(out_dir)


def merge_trajectories(sources: Sequence[str | Path], out_dir: str | Path,
                       segmentation: Segmentation = "turn") -> list[Trajectory]:
    """Every trajectory of `sources` (each a directory, JSONL file or dataset load_trajectories reads) in one
    directory `out_dir` (predictions.jsonl + dataset/, atomically): OREO and rejection sampling on expert and policy
    trajectories together. Records without steps are segmented by `segmentation`; a record without a policy
    (an expert export) is labelled with its source, so the merged set still says where each trajectory came from.
    sources.json lists the sources in order."""
    from rlvr.io import atomic_directory

    if not sources:
        raise TrajectoryError("nothing to merge: give one or more trajectory directories")
    merged = []
    for source in sources:
        merged += [t if t.policy else dataclasses.replace(t, policy=str(source))
                   for t in load_trajectories(source, segmentation)]
    with atomic_directory(Path(out_dir)) as tmp:
        (tmp / JSONL).write_text("".join(json.dumps(t.to_record(), default=str) + "\n" for t in merged))
        write_dataset(merged, tmp / DATASET_DIR)
        (tmp / "sources.json").write_text(json.dumps([str(s) for s in sources], indent=2))
    return merged


# ---------------------------------------------------------------- the token view
@dataclass(frozen=True)
class TokenizedTrajectory:
    """One trajectory as the policy's tokens. Index j of each list describes token j."""

    input_ids: list[int]
    action_mask: list[int]  # 1 on tokens the policy generated (assistant content and its end-of-turn token)
    step_starts: list[int]  # token index where each step starts (an action token)
    reward: float

    def __len__(self) -> int:
        return len(self.input_ids)


def _render(tokenizer, messages, generation_prompt: bool, tools=None) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt)


def tokenize(trajectory: Trajectory, tokenizer, where: str = "trajectory") -> TokenizedTrajectory:
    """Render the conversation with the tokenizer's chat template and mark the assistant tokens and step starts.

    An assistant turn's tokens are those between the rendered history with a generation prompt and the rendered
    history including that turn, trailing whitespace excluded: its content and its end-of-turn token, as the
    released OREO dataset marks actions (pcl_dataset_alfworld.py). A step starts at the token holding its first
    character.
    """
    messages = list(trajectory.prompt) + list(trajectory.completion)
    full = _render(tokenizer, messages, generation_prompt=False, tools=trajectory.tools)
    spans: dict[int, tuple[int, int]] = {}  # completion index -> character span of the assistant turn
    offset = len(trajectory.prompt)
    for i, message in enumerate(trajectory.completion):
        if message.get("role") != "assistant":
            continue
        before = _render(tokenizer, messages[: offset + i], generation_prompt=True, tools=trajectory.tools)
        through = _render(tokenizer, messages[: offset + i + 1], generation_prompt=False, tools=trajectory.tools).rstrip()
        if not through.startswith(before) or not full.startswith(through):
            raise TrajectoryError(
                f"{where}: the chat template renders assistant turn {i} differently depending on what follows it "
                "(it re-renders earlier turns), so its tokens cannot be marked; use a prefix-consistent template"
            )
        spans[i] = (len(before), len(through))
        content = _text(message.get("content"))
        if content and full[len(before): len(before) + len(content)] != content:
            raise TrajectoryError(f"{where}: the chat template changes the text of assistant turn {i}; steps cannot "
                                  "be located in it")
    encoding = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
    action = [int(any(a <= start < b for a, b in spans.values())) for start, _ in offsets]
    starts = []
    for i, c in trajectory.steps:
        a, b = spans[i]
        char = min(a + c, b - 1)
        token = next(j for j, (s, e) in enumerate(offsets) if e > char)
        if action[token] and token > 0 and token not in starts:
            starts.append(token)
    return TokenizedTrajectory(ids, action, sorted(starts), trajectory.reward)


def token_dataset(trajectories: list[Trajectory], tokenizer, max_length: int) -> tuple[Dataset, int]:
    """The trajectories as token rows (input_ids, action_mask, step_starts, reward) and how many were too long."""
    from datasets import Dataset

    rows, too_long = [], 0
    for n, trajectory in enumerate(trajectories):
        tokens = tokenize(trajectory, tokenizer, where=f"trajectory {n} (example {trajectory.example_id})")
        if len(tokens) > max_length:
            too_long += 1
            continue
        rows.append({"input_ids": tokens.input_ids, "action_mask": tokens.action_mask,
                     "step_starts": tokens.step_starts, "reward": tokens.reward})
    if not rows:
        raise TrajectoryError(f"no trajectory fits max_length={max_length} tokens ({too_long} are longer): "
                              "raise max_length")
    return Dataset.from_list(rows), too_long
