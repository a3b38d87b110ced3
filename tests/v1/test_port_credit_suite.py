"""vf-credit-suite (verifiers 0.1.9) and its v1 port v1-credit-suite (verifiers 0.4) against one table of golden
cases worked out by hand (data/credit_suite_golden.json): the same replies must give the same prompts,
observations, turn rewards, anchor states and outcome on both sides.

The 0.1.9 side runs here: real verifiers rollouts of the environment and its TurnRubric, the model scripted
(rlvr.testing.ScriptedClient). The v1 side runs in the bridge's interpreter (.venv-v1), in a subprocess
(credit_suite_v1_cases.py): the worker's episode path, verifiers' harness, interception and scoring, the model a
scripted local chat server; its traces are read the way rlvr.v1.convert reads them. No vLLM server, no training."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from vf_credit_suite import load_environment

from rlvr.rollouts import from_state
from rlvr.testing import ScriptedClient
from rlvr.v1.bridge import v1_python
from rlvr.v1.convert import state_keys, turn_rewards

HERE = Path(__file__).parent
GOLDEN = HERE / "data" / "credit_suite_golden.json"
CASES = json.loads(GOLDEN.read_text())["cases"]
FIELDS = ("system", "observations", "turn_rewards", "state_keys", "outcome", "valid_actions", "first_result_turn")
# the port's `Result: ` observations are user messages; rlvr.v1.convert reads tool results from tool nodes only,
# so the v1 side carries MT-GRPO's split in the observation text alone (v1-credit-suite's README, "Not carried over")
V1_FIELDS = tuple(f for f in FIELDS if f != "first_result_turn")
V1_TIMEOUT_S = 300  # the run takes seconds; generous for a loaded machine


def assert_golden(side: str, case: dict, got: dict, fields: tuple[str, ...] = FIELDS) -> None:
    wrong = [f"{f}: expected {case[f]!r}, got {got[f]!r}" for f in fields if got[f] != case[f]]
    assert not wrong, f"{side} differs from the golden case {case['name']!r} ({GOLDEN.name}): " + "; ".join(wrong)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vf_credit_suite_gives_the_golden_cases(case):
    env = load_environment(task=case["task"], task_params=case["params"], num_examples=1, num_eval_examples=1)
    out = asyncio.run(env.evaluate(ScriptedClient(case["replies"]), "scripted", num_examples=1,
                                   rollouts_per_example=1))
    (state,) = out["state"]
    record = from_state(state)
    assert_golden("vf-credit-suite (verifiers 0.1.9)", case, {
        "system": state["prompt"][0]["content"],
        "observations": [state["prompt"][-1]["content"]] + [m["content"] for m in state["completion"]
                                                            if m["role"] == "user"],
        "turn_rewards": list(record.turn_rewards), "state_keys": list(record.state_keys), "outcome": record.outcome,
        "valid_actions": state["metrics"]["valid_action"], "first_result_turn": record.first_result_turn,
    })


@cache
def v1_runs() -> dict[int, dict]:
    """Every golden case through the port, in one run of the bridge's interpreter: case index -> its episode."""
    proc = subprocess.run([str(v1_python()), str(HERE / "credit_suite_v1_cases.py"), str(GOLDEN)],
                          capture_output=True, text=True, timeout=V1_TIMEOUT_S,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "VIRTUAL_ENV": ""})
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise AssertionError(f"the v1 run failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return {r["case"]: r for r in map(json.loads, proc.stdout.splitlines())}


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_v1_port_gives_the_golden_cases(index):
    case, run = CASES[index], v1_runs()[index]
    assert run["error"] is None, f"v1-credit-suite's episode for {case['name']!r} failed: {run['error']}"
    (trace,) = run["traces"]
    nodes = trace["nodes"]
    sampled = [i for i, node in enumerate(nodes) if node["sampled"]]
    assert [nodes[i]["message"]["content"] for i in sampled] == case["replies"]
    rewards, keys = turn_rewards(trace, sampled), state_keys(trace, sampled)
    assert_golden("v1-credit-suite (verifiers 0.4)", case, {
        "system": nodes[0]["message"]["content"],
        "observations": [n["message"]["content"] for n in nodes if n["message"]["role"] == "user"]
        + [trace["info"]["final_reply"]],
        "turn_rewards": [rewards[i] for i in sampled], "state_keys": [keys[i] for i in sampled],
        "outcome": trace["rewards"]["outcome"]["score"], "valid_actions": trace["metrics"]["valid_action"],
    }, V1_FIELDS)
    # the outcome is the trace's only reward, weight 1, as it is vf-credit-suite's rollout reward
    assert {name: r["weight"] for name, r in trace["rewards"].items()} == {"outcome": 1.0}
