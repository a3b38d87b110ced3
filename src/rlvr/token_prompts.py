"""Token prompts: each turn after the first is prompted with the token ids the model actually sampled, not with a
re-tokenisation of its text.

A chat server renders the whole history from messages at every turn, so an earlier reply comes back as
`tokenize(decode(sampled ids))`. At temperature 1 a model samples non-canonical splits ("se" + "arch" where the
tokenizer writes "search"), and a reply cut at `max_tokens` ends without the end-of-turn token the template adds:
the next turn's prompt then differs from the tokens that were sampled, the rollout is not one token sequence, and
token-level GAE, which needs the environment tokens between the turns, cannot run on it (`rlvr.credit.tokens`).

With token prompts, the next turn's prompt is

    previous prompt ids + previous completion ids + the end-of-turn ids the completion lacks + the environment's part

where the environment's part is what the chat template puts after the previous turn: the tokens of the whole
conversation rendered with the generation prompt, after the tokens of the conversation up to and including the
previous assistant message. The ids go to vLLM as `kv_transfer_params.prompt_token_ids` of an ordinary chat request,
vLLM's own way to prompt a chat request with given ids (`vllm/renderers/online_renderer.py`,
`_reused_prompt_token_ids`): templating and tokenisation are skipped, the rest of the request is as usual.

verifiers 0.1.9.post3 has the same idea (`interleaved_rollouts`, `verifiers/utils/token_utils.py` `get_prompt_ids`,
for PRIME-RL's `/v1/chat/completions/tokens` route) but tokenises the environment's reply as a conversation of its
own, so a template that opens every conversation with a default system prompt (SmolLM2's, Qwen2.5's) puts that
prompt in the middle of the history at every turn. Here the environment's part is cut from the whole conversation.
The end-of-turn ids are found as verifiers finds them: the template's tokens after an assistant reply, of which
the completion may already end with a prefix (its end-of-turn token, when it stopped on it).

A turn falls back to the server's own rendering when its messages do not extend the previous turn's (an
environment that rewrites or windows its history) or when the template re-renders the earlier conversation
differently (the prefix does not hold at the token level); the trainer then sees that rollout as one sample per
turn, as without token prompts. Held-out evaluations keep the server's rendering: they measure the model as it is
deployed, on messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rlvr.seeding import ClientView, rollout_client_views

KV_TRANSFER_FIELD = "kv_transfer_params"  # vLLM ChatCompletionRequest field
PROMPT_IDS_FIELD = "prompt_token_ids"  # its key for the ids to prompt with


def _plain(message: Any) -> dict[str, Any]:
    return message if isinstance(message, dict) else message.model_dump(exclude_none=True)


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    dump = lambda ms: json.dumps([_plain(m) for m in ms], sort_keys=True, default=str)  # noqa: E731
    return dump(a) == dump(b)


def render_ids(tokenizer, messages: Sequence[Any], tools: Sequence[Any] | None, generation_prompt: bool) -> list[int]:
    """The chat template's token ids of `messages`, as the server renders them (no extra special tokens)."""
    return list(tokenizer.apply_chat_template([_plain(m) for m in messages], tools=tools or None, tokenize=True,
                                              add_generation_prompt=generation_prompt, return_dict=False))


def end_of_turn_ids(tokenizer) -> list[int]:
    """The template's tokens after an assistant reply (ChatML: `<|im_end|>` and the newline): what follows the last
    token of a dummy reply's content in a rendered two-message chat (as verifiers' `get_prompt_ids` computes them)."""
    content = "World!"
    chat = render_ids(tokenizer, [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": content}],
                      None, generation_prompt=False)
    last = tokenizer.encode(content, add_special_tokens=False)[-1]
    where = max(i for i, tok in enumerate(chat) if tok == last)
    return chat[where + 1:]


def missing_end_of_turn(completion_ids: Sequence[int], end_ids: Sequence[int]) -> list[int]:
    """The end-of-turn ids a completion lacks: it may end with a prefix of them (it stopped on its end-of-turn
    token) or with none (it was cut at max_tokens); the longest such overlap counts."""
    for overlap in range(min(len(completion_ids), len(end_ids)), 0, -1):
        if list(completion_ids[-overlap:]) == list(end_ids[:overlap]):
            return list(end_ids[overlap:])
    return list(end_ids)


@dataclass(frozen=True)
class Exchange:
    """One model call of a rollout as sent and answered: its messages and the ids of its prompt and completion."""

    messages: tuple[Any, ...]
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]


def next_prompt_ids(tokenizer, previous: Exchange, messages: Sequence[Any], tools: Sequence[Any] | None,
                    end_ids: Sequence[int]) -> list[int] | None:
    """The prompt ids of the turn after `previous` (module docstring), or None when they cannot be built: the
    messages do not extend the previous turn's by an assistant message, or the template renders the conversation so
    far differently once more messages follow."""
    n = len(previous.messages)
    if len(messages) <= n + 1 or _plain(messages[n]).get("role") != "assistant" or not _same(messages[:n],
                                                                                              previous.messages):
        return None
    so_far = render_ids(tokenizer, messages[:n + 1], tools, generation_prompt=False)
    whole = render_ids(tokenizer, messages, tools, generation_prompt=True)
    if whole[:len(so_far)] != so_far:
        return None
    sampled = list(previous.prompt_ids) + list(previous.completion_ids)
    return sampled + missing_end_of_turn(previous.completion_ids, end_ids) + whole[len(so_far):]


class TokenPromptClient(ClientView):
    """One rollout's view of an AsyncOpenAI client whose chat completions after the first are prompted with the
    sampled token ids; everything else is the client's own."""

    def __init__(self, client, tokenizer, end_ids: list[int] | None = None):
        super().__init__(client, self._create)
        self._completions = client.chat.completions
        self._tokenizer = tokenizer
        self._end_ids = end_ids if end_ids is not None else end_of_turn_ids(tokenizer)
        self._previous: Exchange | None = None

    async def _create(self, *, messages, **kwargs):
        ids = None
        if self._previous is not None:
            ids = next_prompt_ids(self._tokenizer, self._previous, messages, kwargs.get("tools"), self._end_ids)
        if ids is not None:
            extra_body = dict(kwargs.get("extra_body") or {})
            extra_body[KV_TRANSFER_FIELD] = {**(extra_body.get(KV_TRANSFER_FIELD) or {}), PROMPT_IDS_FIELD: ids}
            kwargs["extra_body"] = extra_body
        response = await self._completions.create(messages=messages, **kwargs)
        prompt_ids = getattr(response, "prompt_token_ids", None)
        completion_ids = getattr(response.choices[0], "token_ids", None) if response.choices else None
        # Without ids in the answer (a server that does not return them) the next turn renders from messages.
        self._previous = (Exchange(tuple(messages), tuple(prompt_ids), tuple(completion_ids))
                          if prompt_ids is not None and completion_ids is not None else None)
        return response


@contextmanager
def token_prompt_rollouts(env, tokenizer, enabled: bool = True):
    """Within the block, every rollout of `env` prompts its turns after the first with token ids (`enabled` False:
    the environment untouched). `tokenizer` must render chats as the server does (`check_server` checks it)."""
    if not enabled:
        yield env
        return
    end_ids = end_of_turn_ids(tokenizer)
    with rollout_client_views(env, lambda input, client: TokenPromptClient(client, tokenizer, end_ids)):
        yield env


def sent_prompt_ids(request: Mapping[str, Any]) -> list[int] | None:
    """The token ids a chat request's keyword arguments prompt with, if any (for tests and logs)."""
    return ((request.get("extra_body") or {}).get(KV_TRANSFER_FIELD) or {}).get(PROMPT_IDS_FIELD)
