"""`repeated_turns`: assistant turns that repeat the one before them verbatim, the statistic that shows an agent
stuck on one action (rlvr.rollouts; in every training log and evaluation summary)."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from rlvr.rollouts import Rollout, repeated_turns, rollout_statistics


def chat(*replies: str, observation: str = "page") -> list[dict]:
    messages = []
    for reply in replies:
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": observation}]
    return messages


def test_hand_cases():
    assert repeated_turns([]) == 0
    assert repeated_turns(chat("search[mat]")) == 0
    # WebShop's held-out failure after RL: a miscopied product id, answered "Invalid action" each time
    assert repeated_turns(chat("search[bars]", "click[S070063B47]", "click[S070063B47]", "click[S070063B47]")) == 2
    assert repeated_turns(chat("a", "b", "a", "b")) == 0  # alternating is not repeating
    assert repeated_turns(chat("click[x]", " click[x]\n")) == 1  # the action, not its surrounding whitespace
    # the environment's messages between them do not count, nor does a repeated observation
    assert repeated_turns(chat("a", "b", observation="Invalid action")) == 0


def test_tool_calls_are_part_of_the_action():
    def call(arguments: str) -> dict:
        return {"role": "assistant", "content": "",
                "tool_calls": [{"id": "1", "type": "function", "function": {"name": "calc", "arguments": arguments}}]}

    tool = {"role": "tool", "tool_call_id": "1", "content": "3"}
    assert repeated_turns([call('{"x": 1}'), tool, call('{"x": 2}'), tool]) == 0
    assert repeated_turns([call('{"x": 1}'), tool, call('{"x": 1}'), tool]) == 1


def test_a_text_completion_has_no_turns_to_repeat():
    assert repeated_turns(list("aaa")) == 0  # a completion-format environment's string, as a list of characters


@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=12))
def test_properties(replies):
    n = repeated_turns(chat(*replies))
    assert 0 <= n <= max(len(replies) - 1, 0)
    assert n == sum(x == y for x, y in pairwise(replies))
    assert repeated_turns(chat(*replies, *replies[-1:])) == n + (1 if replies else 0)  # one more of the last


def test_it_is_a_rollout_statistic():
    def rollout(*replies: str) -> Rollout:
        return Rollout(example_id=0, task="t", prompt=[], completion=chat(*replies), answer="", outcome=0.0,
                       metrics={}, turns=())

    stats = rollout_statistics([rollout("a", "a", "a"), rollout("a", "b")])
    assert stats["repeated_turns"] == [2.0, 0.0]
