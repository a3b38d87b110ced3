"""Tool calls written by a policy, read defensively, and a verifiers tool environment that survives any of them.

A policy in RL writes anything. verifiers' ToolEnv (0.1.9.post3) answers a bad native call with the bare exception
text (`'python'` for an unknown tool, `Expecting value: line 1 column 1 (char 0)`, a TypeError about positional
arguments), runs every call of a turn one after another however many there are, and `json.loads` on a few thousand
nested brackets raises RecursionError. Here every bad call becomes an observation `Error: <what was wrong>; <how
to fix it>` and never an exception:

    parse_json_object(text, what=..., example=...)   size and nesting limits, then json.loads
    check_arguments(tools, name, args)                known tool, known argument names, required ones, JSON types
    GuardedToolEnv(tools=[...], max_calls_per_turn=1) a StatefulToolEnv built on both; calls past the per-turn
                                                      limit are answered with an error instead of being run

verifiers' own errors (`vf.Error`, e.g. a SandboxError when the sandbox itself fails) still propagate: the rollout
loop ends that rollout with `state["error"]`, as verifiers intends.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import verifiers as vf
from verifiers.utils.async_utils import maybe_await

MAX_ARGUMENT_CHARS = 20_000  # a tool call's JSON text; a search query or a GSM8K program is far shorter
MAX_JSON_DEPTH = 16  # nesting of objects and arrays; the tools here take flat objects
MAX_CALLS_PER_TURN = 4
JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


class ToolCallError(ValueError):
    """A tool call the model got wrong. The message says what was wrong and how to fix it; the model sees it."""


def json_nesting_depth(text: str) -> int:
    """The deepest nesting of [ and { in a JSON text, not counting brackets inside strings (one linear pass)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for t, name in JSON_TYPES.items() if type(value) is t), type(value).__name__)


def parse_json_object(
    text: Any,
    *,
    what: str,
    example: str,
    max_chars: int = MAX_ARGUMENT_CHARS,
    max_depth: int = MAX_JSON_DEPTH,
) -> dict[str, Any]:
    """`text` as a JSON object, or a ToolCallError naming `what` was read and showing `example` of a good one."""
    if not isinstance(text, str):
        raise ToolCallError(f"{what} must be a JSON object written as text, e.g. {example}")
    if len(text) > max_chars:
        raise ToolCallError(f"{what} is {len(text):,} characters long, over the limit of {max_chars:,}; "
                            f"write a short object, e.g. {example}")
    if json_nesting_depth(text) > max_depth:
        raise ToolCallError(f"{what} nests more than {max_depth} levels of brackets; write a flat object, e.g. {example}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolCallError(f"{what} is not valid JSON ({e.msg} at character {e.pos}); write e.g. {example}") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer of more than 4,300 digits
        raise ToolCallError(f"{what} could not be read as JSON ({e}); write e.g. {example}") from None
    if not isinstance(value, dict):
        raise ToolCallError(f"{what} must be a JSON object, got {json_type(value)}; write e.g. {example}")
    return value


def tool_parameters(func: Callable, hidden: tuple[str, ...] = ()) -> dict[str, inspect.Parameter]:
    """The named parameters the model fills in: the function's, without `hidden` ones the environment injects
    (and without *args / **kwargs)."""
    return {n: p for n, p in inspect.signature(func).parameters.items()
            if n not in hidden and n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _takes_any_keyword(func: Callable) -> bool:
    return any(p.kind == p.VAR_KEYWORD for p in inspect.signature(func).parameters.values())


_ANNOTATIONS = {t.__name__: t for t in JSON_TYPES}


def _expected_type(p: inspect.Parameter) -> type | None:
    annotation = p.annotation
    if isinstance(annotation, str):  # `from __future__ import annotations` leaves annotations as strings
        annotation = _ANNOTATIONS.get(annotation)
    return annotation if annotation in JSON_TYPES else None


def _fits(value: Any, expected: type) -> bool:
    if isinstance(value, bool):  # JSON true/false are not numbers, although Python's bool is an int
        return expected is bool
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


def argument_example(func: Callable, hidden: tuple[str, ...] = ()) -> str:
    """A JSON object naming the tool's arguments with their types, e.g. {"query": <string>}."""
    params = tool_parameters(func, hidden).items()
    return "{" + ", ".join(f'"{n}": <{JSON_TYPES.get(_expected_type(p), "value")}>' for n, p in params) + "}"


def check_tool_name(tools: Mapping[str, Callable], name: Any) -> None:
    if not isinstance(name, str) or name not in tools:
        shown = repr(name) if isinstance(name, str) and len(name) <= 60 else "that name"
        raise ToolCallError(f"unknown tool {shown}; available tools: {', '.join(sorted(tools))}")


def check_arguments(tools: Mapping[str, Callable], name: Any, args: dict[str, Any], hidden: tuple[str, ...] = ()):
    """Raise a ToolCallError unless `name` is one of `tools` and `args` fit its signature (names and JSON types)."""
    check_tool_name(tools, name)
    params = tool_parameters(tools[name], hidden)
    example = argument_example(tools[name], hidden)
    if (unknown := sorted(set(args) - set(params))) and not _takes_any_keyword(tools[name]):
        names = ", ".join(repr(a[:40]) for a in unknown[:5])
        raise ToolCallError(f"{name} has no argument {names}; call it with {example}")
    missing = [n for n, p in params.items() if p.default is p.empty and n not in args]
    if missing:
        raise ToolCallError(f"{name} needs the argument {', '.join(map(repr, missing))}; call it with {example}")
    for arg, value in args.items():
        expected = _expected_type(params[arg]) if arg in params else None
        if expected is None or _fits(value, expected):
            continue
        kind = JSON_TYPES[expected]
        article = "an" if kind[0] in "aeiou" else "a"
        raise ToolCallError(f"argument {arg!r} of {name} must be {article} {kind}, got {json_type(value)}; "
                            f"call it with {example}")


class GuardedToolEnv(vf.StatefulToolEnv):
    """verifiers' tool environment answering every failed call with a tool message `Error: ...` that says what to fix.

    At most `max_calls_per_turn` calls of one assistant turn run; the others are answered with an error (every call
    id gets its reply, as the chat protocol requires). Arguments are parsed with `parse_json_object`'s limits and
    checked against the tool's signature before it runs. `update_tool_args` (the StatefulToolEnv hook) returns the
    arguments unchanged; an environment that injects state overrides it and lists the injected names in
    `add_tool(..., args_to_skip=[...])`.
    """

    def __init__(
        self,
        tools: list[Callable] | None = None,
        max_calls_per_turn: int = MAX_CALLS_PER_TURN,
        max_argument_chars: int = MAX_ARGUMENT_CHARS,
        **kwargs,
    ):
        if max_calls_per_turn < 1:
            raise ValueError(f"max_calls_per_turn must be >= 1, got {max_calls_per_turn}")
        super().__init__(tools=tools, **kwargs)
        self.max_calls_per_turn = max_calls_per_turn
        self.max_argument_chars = max_argument_chars

    def update_tool_args(self, tool_name: str, tool_args: dict, messages: vf.Messages, state: vf.State, **kwargs):
        return tool_args

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        assert isinstance(messages, list)
        calls = messages[-1].get("tool_calls") or []
        replies = []
        for i, call in enumerate(calls):
            call_id = str(call.get("id") or "") if isinstance(call, dict) else ""
            content = await self._answer(i, call, messages, state)
            replies.append({"role": "tool", "content": content, "tool_call_id": call_id})
        return replies

    async def _answer(self, i: int, call: Any, messages: vf.Messages, state: vf.State) -> str:
        """What the model reads for its i-th call of the turn: the tool's output, or `Error: ...`."""
        name = None
        try:
            if i >= self.max_calls_per_turn:
                raise ToolCallError(
                    f"only {self.max_calls_per_turn} tool call(s) per turn are run and this was call {i + 1}; "
                    "read the results, then make the next call in your next turn"
                )
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                raise ToolCallError('a tool call needs a "function" with a "name" and "arguments"')
            name = function.get("name")
            check_tool_name(self.tool_map, name)
            hidden = tuple(self.skipped_args.get(name, ()))
            example = argument_example(self.tool_map[name], hidden)
            args = parse_json_object(function.get("arguments") or "{}", what=f"the arguments of {name}",
                                     example=example, max_chars=self.max_argument_chars)
            check_arguments(self.tool_map, name, args, hidden)
            args = self.update_tool_args(name, args, messages, state)
            result = await maybe_await(self.tool_map[name], **args)
        except vf.Error:
            raise
        except ToolCallError as e:
            return f"Error: {e}"
        except Exception as e:  # the tool itself failed: its message is the model's feedback
            return f"Error: {name} failed: {shorten(str(e))}"
        return str(result)


def shorten(text: str, limit: int = 300) -> str:
    """An error message cut to `limit` characters (a failing tool may quote a 20,000-character argument)."""
    return text if len(text) <= limit else text[:limit] + " ..."
