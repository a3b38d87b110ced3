"""rlvr.tools: model-written tool calls read defensively, and GuardedToolEnv's replies to bad calls."""

from __future__ import annotations

import asyncio
import json

import pytest
import verifiers as vf
from datasets import Dataset
from hypothesis import given
from hypothesis import strategies as st

from rlvr.tools import (
    GuardedToolEnv,
    ToolCallError,
    argument_example,
    check_arguments,
    json_nesting_depth,
    parse_json_object,
)

EXAMPLE = '{"query": "Ada Lovelace"}'


def lookup(query: str, limit: int = 3) -> str:
    """Look something up.

    Args:
        query: What to look up.
        limit: How many results.
    """
    if query == "boom":
        raise RuntimeError("the index is closed")
    if query == "sandbox":
        raise vf.SandboxError("the sandbox itself failed")
    return f"{query}:{limit}"


def read(text):
    return parse_json_object(text, what="the arguments", example=EXAMPLE)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"query": ', "the arguments is not valid JSON (Expecting value at character 10)"),
        ("[" * 5000 + "]" * 5000, "nests more than 16 levels of brackets; write a flat object"),
        ('{"query": ' + "[" * 5000, "nests more than 16 levels"),
        ('{"n": ' + "9" * 5000 + "}", "could not be read as JSON (Exceeds the limit (4300 digits)"),
        ('["x"]', "must be a JSON object, got array"),
        ("null", "must be a JSON object, got null"),
        ('{"query": "' + "x" * 30_000 + '"}', "is 30,013 characters long, over the limit of 20,000"),
        (None, "must be a JSON object written as text"),
    ],
)
def test_bad_json_is_a_tool_call_error_that_says_what_to_write(text, message):
    with pytest.raises(ToolCallError, match=None) as caught:
        read(text)
    assert message in str(caught.value) and EXAMPLE in str(caught.value)


def test_brackets_inside_strings_do_not_count_as_nesting():
    assert json_nesting_depth('{"q": "[[[[{{{{\\"[[[["}') == 1
    assert read('{"query": "[[[[[[[[[[[[[[[[[[[[[["}') == {"query": "[" * 22}


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=12))
def test_nesting_depth_of_any_json_value(value):
    def depth(v):
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        return 0

    assert json_nesting_depth(json.dumps(value)) == depth(value)


def test_arguments_are_checked_against_the_signature():
    tools = {"lookup": lookup}
    assert argument_example(lookup) == '{"query": <string>, "limit": <integer>}'
    check_arguments(tools, "lookup", {"query": "x"})
    cases = [
        ("web", {}, "unknown tool 'web'; available tools: lookup"),
        (7, {}, "unknown tool that name"),
        ("lookup", {"q": "x"}, "lookup has no argument 'q'; call it with {\"query\": <string>, \"limit\": <integer>}"),
        ("lookup", {}, "lookup needs the argument 'query'"),
        ("lookup", {"query": 5}, "argument 'query' of lookup must be a string, got integer"),
        ("lookup", {"query": "x", "limit": True}, "argument 'limit' of lookup must be an integer, got boolean"),
        ("lookup", {"query": "x", "limit": 2.5}, "must be an integer, got number"),
    ]
    for name, args, message in cases:
        with pytest.raises(ToolCallError) as caught:
            check_arguments(tools, name, args)
        assert message in str(caught.value)

    def flexible(query: str, **options) -> str:
        return query

    check_arguments({"flexible": flexible}, "flexible", {"query": "x", "anything": [1]})  # **options takes it
    assert argument_example(flexible) == '{"query": <string>}'


class LookupEnv(GuardedToolEnv):
    def __init__(self, **kwargs):
        data = Dataset.from_list([{"question": "q", "answer": "a"}])
        super().__init__(tools=[lookup], dataset=data, **kwargs)


def assistant_calls(*calls):
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for i, (name, arguments) in enumerate(calls)
    ]}]


def replies(env, *calls):
    return asyncio.run(env.env_response(assistant_calls(*calls), {}))


def test_every_bad_call_gets_an_error_reply_and_the_good_ones_run():
    env = LookupEnv(max_calls_per_turn=2)
    out = replies(env, ("lookup", '{"query": "x"}'), ("lookup", '{"query": "boom"}'), ("lookup", '{"query": "y"}'))
    assert [r["tool_call_id"] for r in out] == ["c0", "c1", "c2"] and all(r["role"] == "tool" for r in out)
    assert out[0]["content"] == "x:3"
    assert out[1]["content"] == "Error: lookup failed: the index is closed"
    assert out[2]["content"].startswith("Error: only 2 tool call(s) per turn are run and this was call 3")
    bad = replies(env, ("nope", "{}"), ("lookup", "[" * 3000))
    assert bad[0]["content"] == "Error: unknown tool 'nope'; available tools: lookup"
    assert bad[1]["content"].startswith("Error: the arguments of lookup nests more than 16 levels")
    weird = asyncio.run(env.env_response([{"role": "assistant", "content": "", "tool_calls": ["x", {"id": 5}]}], {}))
    assert [r["content"] for r in weird] == ['Error: a tool call needs a "function" with a "name" and "arguments"'] * 2


def test_verifiers_errors_still_end_the_rollout():
    with pytest.raises(vf.SandboxError):
        replies(LookupEnv(), ("lookup", '{"query": "sandbox"}'))
