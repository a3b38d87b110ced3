"""TurnRubric inside real verifiers environments (ToolEnv, MultiTurnEnv), driven by a scripted policy.

verifiers wraps the environment's rubric with its monitor rubrics; these tests check that the per-turn rewards and
the outcome survive that wrapping, that `rlvr.rollouts` reads them into records, and that the estimator's
advantages computed from those records are the hand-computed ones.
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
import verifiers as vf
from datasets import Dataset
from transformers import AutoTokenizer

from rlvr import models
from rlvr.credit import build_token_view, prefix_mismatch
from rlvr.rollouts import assign_advantages, from_state
from rlvr.rubrics import TurnRubric, rewards

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
XML = vf.XMLParser(fields=["think", ("tool", "answer")])


def search(query: str) -> str:
    """Search the encyclopedia.

    Args:
        query: what to look for
    """
    if query == "fail":
        raise RuntimeError("search backend unavailable")
    return "Paris is the capital and largest city of France."


def call(query: str) -> dict:
    return {"name": "search", "arguments": json.dumps({"query": query})}


def group_inputs(n: int) -> list[dict]:
    return [{"prompt": QUESTION, "answer": "Paris", "task": "qa", "example_id": 0} for _ in range(n)]


def run_group(env: vf.Environment, client) -> list[vf.State]:
    coro = env.generate(group_inputs(3), client=client, model="scripted", max_concurrent=-1, use_tqdm=False)
    return asyncio.run(coro)["state"]


def by_opener(states: list[vf.State]) -> dict[str, vf.State]:
    return {s["trajectory"][0]["completion"][0]["content"]: s for s in states}


# Hand computation shared by both environments (same rewards by construction):
#   rollout A: turn 0 searches, result holds "Paris" -> r0 = 0.2 (tool ok) + 0.5 (answer in result) = 0.7;
#              turn 1 answers "Paris" -> r1 = 0; outcome 1; first tool result after turn 0.
#   rollout B: answers "Lyon" at once -> r0 = 0; outcome 0; no tool result.
#   rollout C: turn 0 search fails ("Error: ...") -> r0 = 0; turn 1 answers "Paris"; outcome 1; result after turn 0.
# R_out = [1, 0, 1]: mean 2/3, sample std sqrt(1/3) = 0.577350 -> A_out = [0.577250, -1.154501, 0.577250]
# R_turn = [0.7, 0, 0]: mean 0.233333, sample std 0.404145 -> A_turn = [1.154415, -0.577207, -0.577207]
# R_turn + R_out = [1.7, 0, 1]: mean 0.9, sample std sqrt(0.73) = 0.854400 -> A_comb[B] = -0.9 / 0.854500 = -1.053247
# MT-GRPO (coef 1): A = [A_out + A_turn, A_out] = [1.731665, 0.577250]; B = [A_comb] = [-1.053247];
#                   C = [0.577250 - 0.577207, 0.577250] = [0.000043, 0.577250]
EXPECTED_ADVANTAGES = {"A": [1.731665, 0.577250], "B": [-1.053247], "C": [0.000043, 0.577250]}
EXPECTED_TURN_REWARDS = {"A": [0.7, 0.0], "B": [0.0], "C": [0.0, 0.0]}
EXPECTED_OUTCOME = {"A": 1.0, "B": 0.0, "C": 1.0}


def answer_in_search_results(env_reply, answer) -> float:
    """The paper's exist_answer_in_search_results (0.5 when the answer occurs in this turn's tool results)."""
    return 0.5 if any(answer.lower() in r.lower() for r in rewards.tool_results(env_reply)) else 0.0


def exact_match(completion, answer, parser) -> float:
    return float((parser.parse_answer(completion) or "").strip() == answer)


def make_rubric() -> TurnRubric:
    return TurnRubric(
        turn_rewards=[(rewards.tool_execution_reward, 1.0), (answer_in_search_results, 1.0)],
        outcome_rewards=[(exact_match, 1.0)],
        parser=XML,
    )


def check_scores(states: list[vf.State], names: dict[str, str]) -> None:
    scored = by_opener(states)
    credited = assign_advantages([from_state(s) for s in states], "mt_grpo", {"coef": 1.0})
    by_record = {r.completion[0]["content"]: r for r in credited}
    for label, opener in names.items():
        state = scored[opener]
        steps = state["trajectory"]
        record = by_record[opener]
        assert [s["reward"] for s in steps] == pytest.approx(EXPECTED_TURN_REWARDS[label]), label
        assert record.turn_rewards == pytest.approx(EXPECTED_TURN_REWARDS[label]), label
        assert list(record.advantages) == pytest.approx(EXPECTED_ADVANTAGES[label], abs=2e-6), label
        assert record.first_result_turn == (None if label == "B" else 0)
        assert state["reward"] == record.outcome == EXPECTED_OUTCOME[label]
        assert state["metrics"]["exact_match"] == EXPECTED_OUTCOME[label]
        assert state["metrics"]["num_turns"] == len(steps)  # the monitor rubric's metric is kept
        assert state["metrics"]["turn_reward"] == pytest.approx(sum(EXPECTED_TURN_REWARDS[label]))
        assert steps[0]["extras"]["tool_result"] == (label != "B")
        assert steps[0]["extras"]["turn_rewards"]["tool_execution_reward"] == pytest.approx(0.2 if label == "A" else 0.0)


def test_turn_rubric_in_tool_env(scripted_client):
    env = vf.ToolEnv(
        tools=[search],
        dataset=Dataset.from_list(group_inputs(1)),
        rubric=make_rubric(),
        parser=XML,
        max_turns=4,
        error_formatter=lambda e: f"Error: {e}",
    )
    # verifiers appended its monitors *into* the TurnRubric instead of wrapping it
    assert isinstance(env.rubric, TurnRubric)
    assert {type(r).__name__ for r in env.rubric.rubrics} == {"MultiTurnMonitorRubric", "ToolMonitorRubric"}
    client = scripted_client(
        [
            [{"content": "<think>A</think>", "tool_calls": [call("capital of France")]}, {"content": "<answer>Paris</answer>"}],
            [{"content": "<answer>Lyon</answer>"}],
            [{"content": "<think>C</think>", "tool_calls": [call("fail")]}, {"content": "<answer>Paris</answer>"}],
        ]
    )
    states = run_group(env, client)
    check_scores(states, {"A": "<think>A</think>", "B": "<answer>Lyon</answer>", "C": "<think>C</think>"})
    assert by_opener(states)["<think>A</think>"]["metrics"]["total_tool_calls"] == 1.0


class XMLSearchEnv(vf.MultiTurnEnv):
    """The paper's protocol: <tool>{json}</tool> in the assistant text, <result> in a user message."""

    async def env_response(self, messages, state, **kwargs):
        parsed = XML.parse(messages[-1]["content"])
        try:
            return [{"role": "user", "content": f"<result>\n{search(**json.loads(parsed.tool))}\n</result>"}]
        except Exception as e:
            return [{"role": "user", "content": f"<result>\nError: {e}\n</result>"}]

    @vf.stop
    async def answered(self, state, **kwargs) -> bool:
        return bool(state["trajectory"]) and XML.parse(state["trajectory"][-1]["completion"][-1]["content"]).answer is not None


XML_SCRIPTS = [
    [{"content": '<think>A</think>\n<tool>{"query": "capital of France"}</tool>'}, {"content": "<answer>Paris</answer>"}],
    [{"content": "<answer>Lyon</answer>"}],
    [{"content": '<think>C</think>\n<tool>{"query": "fail"}</tool>'}, {"content": "<answer>Paris</answer>"}],
]
XML_OPENERS = {"A": XML_SCRIPTS[0][0]["content"], "B": XML_SCRIPTS[1][0]["content"], "C": XML_SCRIPTS[2][0]["content"]}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(models.resolve("tiny-random"))


def test_turn_rubric_in_multiturn_env_and_token_view(scripted_client, tokenizer):
    env = XMLSearchEnv(dataset=Dataset.from_list(group_inputs(1)), rubric=make_rubric(), parser=XML, max_turns=4)
    states = run_group(env, scripted_client(XML_SCRIPTS, tokenizer=tokenizer))
    check_scores(states, XML_OPENERS)

    # Token view of rollout A through the real SmolLM2 chat template: one sequence, env tokens masked.
    record = from_state(by_opener(states)[XML_OPENERS["A"]])
    turns = [t.tokens for t in record.turns]
    assert prefix_mismatch(turns) is None
    advantages = EXPECTED_ADVANTAGES["A"]
    view = build_token_view(turns, advantages)
    assert view.input_ids == list(turns[-1].prompt_ids + turns[-1].completion_ids)
    trained = [i for i, m in enumerate(view.loss_mask) if m]
    assert len(trained) == sum(len(t.completion_ids) for t in turns)
    assert tokenizer.decode([view.input_ids[i] for i in trained if view.turn_index[i] == 0]).startswith("<think>A</think>")
    assert "<result>" in tokenizer.decode([t for t, m in zip(view.input_ids, view.loss_mask, strict=True) if not m])
    assert "<result>" not in tokenizer.decode([view.input_ids[i] for i in trained])
    for k, advantage in enumerate(advantages):
        assert {view.advantages[i] for i in trained if view.turn_index[i] == k} == {advantage}
    assert all(view.advantages[i] == 0.0 and view.turn_index[i] == -1 for i in range(len(view.input_ids)) if not view.loss_mask[i])
    assert all(math.isclose(view.logprobs[i], -0.5) for i in trained)
