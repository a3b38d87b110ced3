"""v1-calculator's scripted expert (environments_v1/v1_calculator/v1_calculator/expert.py): its trajectories are
right (the tool's result is the expression's value, the answer is that result, the taskset's own rewards say so),
and rlvr's SFT path trains on exactly the tokens the model sees and samples through the bridge: every assistant
turn's prompt, as verifiers' train client renders it with rlvr's renderer in the bridge's interpreter
(calculator_expert_cases.py), is the SFT sequence up to that turn, the SFT's trained tokens are the turn's
completion, and the bridge's tool-call parser reads the expert's call back from them. No server, no weights: the
tokenizer of SmolLM2-135M (the model the warm start is for) on both sides."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from transformers import AutoTokenizer

from rlvr import models
from rlvr.trajectories import load_trajectories, tokenize
from rlvr.v1.bridge import RENDERER, v1_python

HERE = Path(__file__).parent


def value(expression: str) -> int:
    """The value of `a + b - c` (the taskset's shape), summed term by term, independent of the calculator tool."""
    assert re.fullmatch(r"\d+( [+-] \d+)+", expression), expression
    words = expression.split()
    return int(words[0]) + sum(int(n) if op == "+" else -int(n) for op, n in zip(words[1::2], words[2::2], strict=True))


def runs(mask: list[int]) -> list[tuple[int, int]]:
    """The [start, end) spans of consecutive 1s."""
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_expert_trajectories_are_right_and_render_as_the_bridge_renders_them(tmp_path):
    model = models.resolve("smollm2-135m")
    proc = subprocess.run([str(v1_python()), str(HERE / "calculator_expert_cases.py"), str(tmp_path), model, RENDERER],
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bridge = {c["example_id"]: c["turns"] for c in json.loads(proc.stdout.strip().splitlines()[-1])["cases"]}

    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 6 == len(bridge)
    for r in records:
        call, tool, answer = r["completion"]
        expression = json.loads(call["tool_calls"][0]["function"]["arguments"])["expression"]
        assert r["prompt"][0]["content"].startswith(f"What is {expression}?")
        assert tool["role"] == "tool" and tool["tool_call_id"] == call["tool_calls"][0]["id"]
        assert int(tool["content"]) == value(expression) == int(r["answer"])
        assert answer == {"role": "assistant", "content": f"Answer: {value(expression)}"}
        assert r["reward"] == 1.0 and r["turn_rewards"] == [1.0, 1.0]

    tokenizer = AutoTokenizer.from_pretrained(model)
    trajectories = load_trajectories(tmp_path)
    for t in trajectories:
        tokens = tokenize(t, tokenizer)
        turns = bridge[t.example_id]
        trained = runs(tokens.action_mask)
        assert len(trained) == len(turns) == 2
        for (start, end), turn in zip(trained, turns, strict=True):
            assert tokens.input_ids[:start] == turn["prompt_ids"]  # SFT's context is the bridge's prompt
            assert tokens.input_ids[start:end] == turn["completion_ids"]  # and its targets the model's sample
        expression = json.loads(t.completion[0]["tool_calls"][0]["function"]["arguments"])["expression"]
        assert turns[0]["tool_calls"] == [{"name": "calculate", "arguments": {"expression": expression},
                                           "status": "ok"}]
        assert turns[0]["content"] == ""
        assert turns[1]["tool_calls"] == [] and turns[1]["content"] == f"Answer: {value(expression)}"
        assert "<tools>" in tokenizer.decode(turns[0]["prompt_ids"])  # the tool schema reaches the model on both
