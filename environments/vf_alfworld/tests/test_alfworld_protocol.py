"""The ReAct text protocol: which action a reply names, and the command the game receives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vf_alfworld.protocol import (
    MAX_ACTION_CHARS,
    extract_action,
    format_observation,
    normalize_command,
    parse_action,
)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<think>fridge first</think>\n<action>go to fridge 1</action>", "go to fridge 1"),
        ("<action>look</action> no wait <action>open drawer 1</action>", "open drawer 1"),  # the last one counts
        ("<ACTION>Go To Cabinet 2.</ACTION>", "go to cabinet 2"),
        ("Think: the apple is hot now.\nAction: move apple 1 to countertop 1\nDone.", "move apple 1 to countertop 1"),
        ("<action>Put Apple 1 in/on CounterTop 1</action>", "put apple 1 in/on countertop 1"),  # the engine maps it
        ("<action>  `take   cd 1 from\tdrawer 3`  </action>", "take cd 1 from drawer 3"),
        ("<action>go to\x00 fridge 1\u202e</action>", "go to fridge 1"),  # control characters become spaces
        ("I would go to the fridge.", None),
        ("<action>look", None),  # unclosed, no Action: line
        ("<action></action>", None),
        ("", None),
    ],
)
def test_parse_action(reply, expected):
    assert parse_action(reply, "alfworld") == expected


def test_twc_commands_keep_their_case():
    assert parse_action("<action>take clean blue T-shirt</action>", "twc") == "take clean blue T-shirt"
    assert parse_action("<action>put sock in drawer</action>", "twc") == "put sock in drawer"  # no alias for twc


def test_an_unclosed_flood_is_read_in_one_pass():
    reply = "<action>" * 100_000 + "go to desk 1"
    assert extract_action(reply) is None
    assert parse_action(reply + "</action>", "alfworld") == "go to desk 1"


@given(st.text(max_size=3_000), st.sampled_from(["alfworld", "twc"]))
def test_any_reply_gives_none_or_one_clean_line(reply, backend):
    command = parse_action(reply, backend)
    if command is not None:
        assert command and len(command) <= MAX_ACTION_CHARS and "\n" not in command
        assert command == command.strip() and "  " not in command
        assert command.encode("utf-8")  # no lone surrogates reach the engines
    for wrapped in (f"<action>{reply}</action>", f"Action: {reply}"):
        normalize_command(wrapped, backend)


def test_format_observation_lists_the_admissible_commands_on_request():
    assert format_observation("You arrive.", ("look", "go to desk 1"), False) == "You arrive."
    assert format_observation("You arrive.", ("look", "go to desk 1"), True) == (
        "You arrive.\n\nAvailable actions: look, go to desk 1"
    )
