"""A scripted stand-in for an OpenAI-compatible chat server: it replays crafted assistant messages.

verifiers talks to the model through `client.chat.completions.create(model=..., messages=..., **sampling_args)`
and reads a `ChatCompletion` back; this client answers that call from a script instead of a model, so that an
environment can be driven through complete rollouts with exactly the outputs a test wants, including native tool
calls. Nothing is truncated at the caller's stop strings: an adversarial policy is not bound by them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletion


@dataclass(frozen=True)
class Reply:
    """One assistant message: its text and its native tool calls as (function name, arguments text) pairs."""

    content: str | None = ""
    tool_calls: tuple[tuple[str, str], ...] = ()
    label: str = field(default="", kw_only=True)  # what the reply tries, shown when a check fails

    def __post_init__(self):
        if not isinstance(self.tool_calls, tuple) or not all(
            isinstance(c, tuple) and len(c) == 2 and all(isinstance(x, str) for x in c) for c in self.tool_calls
        ):
            raise TypeError(f"Reply.tool_calls must be a tuple of (name, arguments text) pairs, got {self.tool_calls!r}")

    def __repr__(self) -> str:
        text = self.content if self.content is None or len(self.content) <= 80 else self.content[:80] + "..."
        calls = f", {len(self.tool_calls)} tool call(s)" if self.tool_calls else ""
        return f"Reply({self.label or 'unlabelled'}: {text!r}{calls})"


Policy = Callable[[list[dict[str, Any]]], Reply | str]


class ScriptedClient:
    """An OpenAI-compatible client whose chat completions come from `script`.

    script: a sequence of replies, one per assistant turn of a rollout (the last one repeats once the script runs
    out, which also makes "the same action again and again"), or a policy `messages -> Reply | str`.
    `requests` keeps the keyword arguments of every call (sampling arguments, tools) for tests to inspect.
    """

    base_url = "scripted://"

    def __init__(self, script: Sequence[Reply | str] | Policy):
        if not callable(script) and not script:
            raise ValueError("ScriptedClient needs at least one reply or a policy")
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.chat = self
        self.completions = self

    def reply_for(self, messages: list[dict[str, Any]]) -> Reply:
        if callable(self.script):
            reply = self.script(messages)
        else:
            reply = self.script[min(len(self.requests) - 1, len(self.script) - 1)]
        return Reply(content=reply) if isinstance(reply, str) else reply

    async def create(self, model: str, messages: list[dict[str, Any]], **kwargs) -> ChatCompletion:
        self.requests.append(kwargs)
        reply = self.reply_for(messages)
        calls = [
            {"id": f"call_{len(self.requests)}_{i}", "type": "function",
             "function": {"name": name, "arguments": arguments}}
            for i, (name, arguments) in enumerate(reply.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if calls:
            message["tool_calls"] = calls
        return ChatCompletion.model_validate({
            "id": "scripted", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
        })
