"""A scripted, deterministic OpenAI-compatible chat client: the *policy* is scripted, the environments and rubrics
under test are real verifiers objects.

Each rollout of a group follows one script (a list of assistant replies). The first assistant reply of every
script is unique, so a later call finds its rollout's script from the conversation itself, whatever the order in
which verifiers interleaves the rollouts. Replies carry token ids and logprobs like vLLM's (`return_token_ids`),
made by a real tokenizer with the model's real chat template.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from openai.types.chat import ChatCompletion


class ScriptedChatClient:
    def __init__(self, scripts: list[list[dict]], tokenizer=None):
        openers = [script[0]["content"] for script in scripts]
        if len(set(openers)) != len(openers) or not all(openers):
            raise ValueError("every script needs a distinct, non-empty first reply content (it identifies the rollout)")
        self.scripts = scripts
        self.tokenizer = tokenizer
        self.unclaimed = list(range(len(scripts)))
        self.calls = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))
        self.base_url = "http://scripted.invalid/v1"

    def _script_for(self, messages: list[dict]) -> tuple[list[dict], int]:
        assistant = [m for m in messages if m["role"] == "assistant"]
        if not assistant:
            return self.scripts[self.unclaimed.pop(0)], 0
        key = assistant[0]["content"]
        for script in self.scripts:
            if script[0]["content"] == key:
                return script, len(assistant)
        raise AssertionError(f"no script starts with {key!r}")

    async def _create(self, *, model: str, messages: list[dict], tools=None, **kwargs) -> ChatCompletion:
        self.calls += 1
        script, turn = self._script_for(messages)
        reply = script[turn]
        message = {"role": "assistant", "content": reply.get("content")}
        if reply.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{turn}_{i}", "type": "function", "function": dict(call)}
                for i, call in enumerate(reply["tool_calls"])
            ]
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop"}
        extra = {}
        if self.tokenizer is not None:
            prompt_ids, completion_ids = self._token_ids(messages, message, tools)
            choice["token_ids"] = completion_ids
            choice["logprobs"] = {
                "content": [{"token": str(t), "logprob": -0.5, "bytes": None, "top_logprobs": []} for t in completion_ids]
            }
            extra["prompt_token_ids"] = prompt_ids
        return ChatCompletion.model_validate(
            {"id": f"scripted-{self.calls}", "object": "chat.completion", "created": 0, "model": model,
             "choices": [choice], **extra}
        )

    def _token_ids(self, messages, message, tools):
        """As vLLM: the prompt rendered by the chat template, the completion = the assistant text + <|im_end|>."""
        tok = self.tokenizer
        text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        prompt_ids = tok(text, add_special_tokens=False)["input_ids"]
        full = tok.apply_chat_template([*messages, message], tools=tools, tokenize=False)
        completion_text = full[len(text) :].rstrip("\n")
        completion_ids = tok(completion_text, add_special_tokens=False)["input_ids"]
        return prompt_ids, completion_ids


@pytest.fixture
def scripted_client():
    return ScriptedChatClient
