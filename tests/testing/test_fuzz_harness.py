"""rlvr.testing: the scripted client, the corpus, the strategies, and check_environment catching each kind of defect
on a small real verifiers environment (a MultiTurnEnv scored by TurnRubric) with defects switched on one at a time."""

from __future__ import annotations

import asyncio
import json

import pytest
import verifiers as vf
from datasets import Dataset
from hypothesis import given, settings

from rlvr.rubrics import TurnRubric
from rlvr.testing import (
    Bounds,
    FuzzFailure,
    Reply,
    ScriptedClient,
    Surface,
    check_environment,
    corpus,
    strategies,
)
from rlvr.testing.__main__ import main as summarize_main

BOUNDS = Bounds(reward=(0.0, 1.0), turn_reward=(0.0, 0.5), turn_total=(0.0, 0.5), rollout_s=10, scoring_s=10)


class EchoEnv(vf.MultiTurnEnv):
    """Echoes the assistant's <say> tag; `defect` switches one misbehaviour on."""

    def __init__(self, defect: str | None = None):
        self.defect = defect
        self.calls = 0

        async def said_hello(turn, turn_index, **kwargs) -> float:
            """0.5 for the first turn that says hello (or every such turn, with the 'farmable' defect)."""
            if self.defect == "raising reward" and "boom" in (turn[-1].get("content") or ""):
                raise RuntimeError("reward bug")
            hello = "<say>hello</say>" in (turn[-1].get("content") or "")
            return 0.5 if hello and (turn_index == 0 or self.defect == "farmable") else 0.0

        async def outcome(completion, **kwargs) -> float:
            return 2.0 if self.defect == "out of range" else 1.0 - 0.5 * (self.calls > 3 and self.defect == "leaky")

        rubric = TurnRubric(turn_rewards=[(said_hello, 1.0)], outcome_rewards=[(outcome, 1.0)])
        data = Dataset.from_list([{"question": "Say hello.", "answer": "hello"}] * 2)
        super().__init__(dataset=data, rubric=rubric, max_turns=3)

    async def env_response(self, messages, state, **kwargs):
        self.calls += 1
        text = messages[-1].get("content") or ""
        if self.defect == "crash" and "crash" in text:
            raise ValueError("env bug")
        if self.defect == "slow":
            await asyncio.sleep(0.3)
        return [{"role": "user", "content": f"you said {text[:20]!r}"}]


HELLO = Reply("<say>hello</say>", label="hello")
SCRIPTS = [[HELLO], [Reply("crash", label="crash")], [Reply("boom", label="boom")], [Reply("", label="empty")]]


def test_a_healthy_environment_passes_and_is_reported():
    report = check_environment(EchoEnv(), SCRIPTS, BOUNDS, probe=[[HELLO]], name="echo")
    assert report.environment == "echo" and report.rollouts == 4 and report.groups == 1
    assert report.stop_conditions == {"max_turns_reached": 4} and report.errors == {}
    assert report.max_turn_total == 0.5 and report.reward_range == [1.0, 1.0]


@pytest.mark.parametrize(
    ("defect", "bounds", "message", "culprit"),
    [
        ("crash", BOUNDS, "an exception escaped the rollout: ValueError('env bug')", "crash"),
        ("out of range", BOUNDS, "reward 2.0 is outside the documented range (0.0, 1.0)", "hello"),
        ("farmable", BOUNDS, "the turn rewards sum to 1.5, outside the documented cap (0.0, 0.5)", "hello"),
        ("raising reward", BOUNDS, "3 reward-function call(s) raised or timed out", "boom"),
        ("slow", Bounds(reward=(0, 1), turn_reward=(0, 0.5), turn_total=(0, 0.5), rollout_s=0.2),
         "the rollout took", "hello"),
        ("leaky", BOUNDS, "the probe scripts score differently after the fuzz", "hello"),
    ],
)
def test_each_defect_is_caught_with_the_script_that_shows_it(defect, bounds, message, culprit):
    with pytest.raises(FuzzFailure) as caught:
        check_environment(EchoEnv(defect), SCRIPTS, bounds, probe=[[HELLO]])
    assert message in str(caught.value) and f"Reply({culprit}:" in str(caught.value)


def test_the_report_is_appended_to_a_file_when_asked(tmp_path, monkeypatch):
    path = tmp_path / "fuzz.jsonl"
    monkeypatch.setenv("RLVR_FUZZ_REPORT", str(path))
    check_environment(EchoEnv(), SCRIPTS[:1], BOUNDS, name="a")
    check_environment(EchoEnv(), SCRIPTS[:1], BOUNDS, name="b")
    assert [json.loads(line)["environment"] for line in path.read_text().splitlines()] == ["a", "b"]


def test_scripted_client_replays_text_and_tool_calls():
    client = ScriptedClient([Reply("first"), Reply(None, (("search", '{"q": 1}'),))])
    first = asyncio.run(client.create(model="m", messages=[], temperature=0.5))
    second = asyncio.run(client.create(model="m", messages=[]))
    third = asyncio.run(client.create(model="m", messages=[]))  # the script ran out: its last reply again
    assert first.choices[0].message.content == "first" and first.choices[0].finish_reason == "stop"
    (call,) = second.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("search", '{"q": 1}')
    assert third.choices[0].message.tool_calls[0].function.name == "search"
    assert client.requests[0] == {"temperature": 0.5}
    policy = ScriptedClient(lambda messages: f"{len(messages)} messages")
    assert asyncio.run(policy.create(model="m", messages=[{}, {}])).choices[0].message.content == "2 messages"
    with pytest.raises(TypeError, match="tuple of \\(name, arguments text\\) pairs"):
        Reply("text", "a label given by position")
    with pytest.raises(ValueError, match="at least one reply"):
        ScriptedClient([])


def test_corpus_covers_what_the_surface_declares():
    surface = Surface(tags=("answer",), json_tool_tag="tool", tools={"search": {"query": "x"}}, code="tag:code",
                      actions=("click[{}]",), good=(HELLO, Reply("<say>bye</say>")))
    replies = corpus.corpus(surface)
    labels = [r.label for r in replies]
    for expected in ["text: lone surrogates", "<answer> then 4,000 spaces, no closing tag (cubic for the naive regex)",
                     "<tool> nested 5,000 brackets deep", "a program that kills itself with a real-time signal",
                     "click[{}] with a 200 KB argument", "<answer> holding power tower"]:
        assert expected in labels
    scripts = corpus.scripts(surface, max_turns=3, random_scripts=5)
    # singles, each after a valid move, each valid move repeated, each ordered pair alternated, then random ones
    assert len(scripts) == 2 * len(replies) + 2 + 2 + 5
    assert [HELLO] * 3 in scripts and [HELLO, surface.good[1]] * 3 in scripts
    assert corpus.scripts(surface, 3, after_valid_move=False)[: len(replies)] == [[r] for r in replies]


@settings(max_examples=30, deadline=None)
@given(strategies.scripts(Surface(tags=("answer",), tools={"search": {"query": "x"}}, actions=("search[{}]",)), 3))
def test_strategies_make_valid_scripts(script):
    assert 1 <= len(script) <= 3 and all(isinstance(r, Reply) for r in script)


def test_reports_are_summarized_per_environment(tmp_path, monkeypatch):
    path = tmp_path / "fuzz.jsonl"
    monkeypatch.setenv("RLVR_FUZZ_REPORT", str(path))
    for name in ("echo", "echo", "other"):
        check_environment(EchoEnv(), SCRIPTS[:2] if name == "other" else SCRIPTS[:1], BOUNDS, name=name)
    summarize_main([str(path), str(tmp_path / "summary.json")])
    rows = json.loads((tmp_path / "summary.json").read_text())["environments"]
    assert [(r["environment"], r["checks"], r["rollouts"]) for r in rows] == [("echo", 2, 2), ("other", 1, 2)]
    assert rows[0]["reward_range"] == [1.0, 1.0] and rows[0]["stop_conditions"] == {"max_turns_reached": 2}
