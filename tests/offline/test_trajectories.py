"""Trajectory datasets: segmentation, reading (rlvr collect's layout and rlvr predict's), the token view the
trainers use (real tokenizer and chat template of tiny-random), resumable collection files, and clear errors."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from rlvr.offline.collect import completed_groups
from rlvr.offline.oreo import OREOCollator
from rlvr.trajectories import (
    Trajectory,
    TrajectoryError,
    from_record,
    load_trajectories,
    segment,
    tokenize,
    write_dataset,
)

PROMPT = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "What is 2 + 3 - 1?"}]
MATH = [{"role": "assistant", "content": "2 + 3 = 5\n5 - 1 = 4\n\nAnswer: 4"}]
AGENT = [{"role": "assistant", "content": "go to desk 1"}, {"role": "user", "content": "You see a lamp."},
         {"role": "assistant", "content": "take lamp"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def record(completion=MATH, **extra):
    return {"example_id": 3, "prompt": PROMPT, "completion": completion, "answer": "4", "reward": 1.0, **extra}


def test_line_segmentation_starts_a_step_after_each_newline_with_text_after_it():
    # "2 + 3 = 5\n" (10 chars) "5 - 1 = 4\n\n" (blank line stays with it) "Answer: 4"
    assert segment(MATH, "line") == ((0, 0), (0, 10), (0, 21))
    assert segment(AGENT, "turn") == ((0, 0), (2, 0))
    assert segment(AGENT, "line") == ((0, 0), (2, 0))


def test_token_view_marks_assistant_tokens_and_step_starts(tokenizer):
    trajectory = from_record(record(), "case", segmentation="line")
    tokens = tokenize(trajectory, tokenizer)
    text = [tokenizer.decode([t]) for t in tokens.input_ids]
    acted = "".join(t for t, a in zip(text, tokens.action_mask, strict=True) if a)
    assert acted == MATH[0]["content"] + "<|im_end|>"  # content and the end-of-turn token, nothing else
    # each step starts at the token holding its first character
    assert ["".join(text[s:]).startswith(line) for s, line in zip(tokens.step_starts, ["2 + 3", "5 - 1", "Answer"],
                                                                    strict=True)] == [True] * 3


def test_agent_turns_are_actions_and_observations_are_not(tokenizer):
    tokens = tokenize(from_record(record(AGENT), "case", segmentation="turn"), tokenizer)
    text = [tokenizer.decode([t]) for t in tokens.input_ids]
    acted = "".join(t for t, a in zip(text, tokens.action_mask, strict=True) if a)
    assert acted == "go to desk 1<|im_end|>take lamp<|im_end|>"
    assert len(tokens.step_starts) == 2 and all(tokens.action_mask[s] for s in tokens.step_starts)


def test_collator_positions_follow_the_loss_layout(tokenizer):
    tokens = tokenize(from_record(record(), "case", segmentation="line"), tokenizer)
    row = {"input_ids": tokens.input_ids, "action_mask": tokens.action_mask, "step_starts": tokens.step_starts,
           "reward": 1.0}
    short = {**row, "input_ids": row["input_ids"][:-3], "action_mask": row["action_mask"][:-3]}
    for states in ("token", "step"):
        batch = OREOCollator(tokenizer.pad_token_id, states, 2.0, -1.0)([row, short])
        assert batch["actions"][0].tolist() == [float(a) for a in tokens.action_mask[1:]]  # position t: token t+1
        assert batch["actions"][1, len(short["input_ids"]) - 1:].sum() == 0  # padding never acts
        assert batch["rewards"].tolist() == [1.0, 1.0]  # R = reward * 2 - 1 (rew_mul, rew_add)
        assert ((batch["states"] == 1) <= (batch["actions"] == 1)).all()  # every state precedes an action
    step_states = OREOCollator(tokenizer.pad_token_id, "step", 1.0, 0.0)([row])["states"][0]
    assert step_states.nonzero().squeeze(-1).tolist() == [s - 1 for s in tokens.step_starts]


def test_collect_layout_round_trips_through_jsonl_and_the_hf_dataset(tmp_path):
    trajectory = from_record(record(), "case", segmentation="line")
    (tmp_path / "predictions.jsonl").write_text(json.dumps(trajectory.to_record()) + "\n")
    write_dataset([trajectory], tmp_path / "dataset")
    assert load_trajectories(tmp_path) == [trajectory]
    (tmp_path / "predictions.jsonl").unlink()  # only the Hugging Face dataset left
    assert load_trajectories(tmp_path) == [trajectory]


def test_a_tool_calling_trajectory_keeps_its_tools_and_renders_them_with_the_prompt(tmp_path, tokenizer):
    tool = {"type": "function", "function": {"name": "calculate", "parameters": {"type": "object"}}}
    calls = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "2 + 3"}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "5"}, {"role": "assistant", "content": "Answer: 4"}]
    trajectory = from_record(record(calls, tools=[tool]), "case", segmentation="turn")
    write_dataset([trajectory], tmp_path / "dataset")
    assert load_trajectories(tmp_path) == [trajectory] and trajectory.tools == [tool]
    tokens = tokenize(trajectory, tokenizer)
    prompt = tokenizer.decode(tokens.input_ids[:tokens.step_starts[0]])
    assert '<tools>\n{"type": "function", "function": {"name": "calculate"' in prompt  # the model saw the schema
    acted = tokenizer.decode([t for t, a in zip(tokens.input_ids, tokens.action_mask, strict=True) if a])
    assert acted == ('<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 + 3"}}\n</tool_call>'
                     "<|im_end|>Answer: 4<|im_end|>")


def test_predict_layout_is_read_given_a_segmentation(tmp_path):
    # what `rlvr predict` (and vf-alfworld's expert export) write: no steps
    predict = record(AGENT, num_turns=2, turn_rewards=[0.5, 1.0], metrics={"won": 1.0}, stop_condition="done",
                     error=None)
    (tmp_path / "predictions.jsonl").write_text(json.dumps(predict) + "\n")
    with pytest.raises(TrajectoryError, match="no step segmentation.*segmentation='turn'"):
        load_trajectories(tmp_path)
    [trajectory] = load_trajectories(tmp_path, segmentation="turn")
    assert trajectory.steps == ((0, 0), (2, 0)) and trajectory.turn_rewards == [0.5, 1.0]


@pytest.mark.parametrize("broken, message", [
    ({"reward": None}, "has no 'reward'.*rlvr collect"),
    ({"completion": [{"role": "user", "content": "hi"}]}, "no assistant message"),
    ({"steps": [[5, 0]]}, r"step \(5, 0\) does not point at an assistant message"),
    ({"reward": float("nan")}, "reward is NaN"),
])
def test_bad_records_say_where_and_what(tmp_path, broken, message):
    (tmp_path / "predictions.jsonl").write_text(json.dumps(record(**{"steps": [[0, 0]]}, **{}) | broken) + "\n")
    with pytest.raises(TrajectoryError, match=message) as err:
        load_trajectories(tmp_path)
    assert "predictions.jsonl:1" in str(err.value)


def test_missing_directory_and_cut_lines(tmp_path):
    with pytest.raises(TrajectoryError, match="no trajectories at"):
        load_trajectories(tmp_path / "nowhere")
    good = json.dumps(record(steps=[[0, 0]]))
    (tmp_path / "predictions.jsonl").write_text(good + "\n" + good[:40])  # a SIGKILL mid-line: ignored
    assert len(load_trajectories(tmp_path)) == 1
    (tmp_path / "predictions.jsonl").write_text(good[:40] + "\n" + good + "\n")  # anywhere else: an error
    with pytest.raises(TrajectoryError, match="predictions.jsonl:1 is not valid JSON"):
        load_trajectories(tmp_path)


def test_resumed_collection_keeps_complete_groups_and_drops_a_cut_one(tmp_path):
    lines = [Trajectory(example_id=e, prompt=PROMPT, completion=MATH, reward=1.0, steps=((0, 0),),
                        segmentation="line", sample_index=k).to_record() for e, k in
             [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]]  # example 2 lost its second rollout to a crash
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"example_id": 2, "prom')
    done = completed_groups(tmp_path, group_size=2)
    assert sorted(done) == [0, 1]
    assert [json.loads(x)["example_id"] for x in path.read_text().splitlines()] == [0, 0, 1, 1]
