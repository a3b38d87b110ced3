"""Token prompts (rlvr.token_prompts): a turn after the first is prompted with the ids the model sampled plus the
environment's part of the template, so a rollout stays one token sequence even when the model samples a split of
a word that the tokenizer would not write; hand cases and properties on SmolLM2's real tokenizer, fallbacks, and
against the real vLLM server with tiny-random (which samples such splits all the time)."""

from __future__ import annotations

import asyncio

import pytest
from choice_env import load_environment
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from train_script import config

from rlvr.credit.tokens import prefix_mismatch
from rlvr.seeding import number_rollouts, seeded_rollouts
from rlvr.testing.client import ScriptedClient
from rlvr.token_prompts import (
    Exchange,
    end_of_turn_ids,
    missing_end_of_turn,
    next_prompt_ids,
    render_ids,
    sent_prompt_ids,
    token_prompt_rollouts,
)

FIRST = [{"role": "system", "content": "Pick an action."}, {"role": "user", "content": "You see a door."}]


@pytest.fixture(scope="module")
def tokenizer(smol_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smol_model)


def chat_text(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_the_end_of_turn_ids_are_chatml_s(tokenizer):
    end = end_of_turn_ids(tokenizer)
    assert tokenizer.convert_ids_to_tokens(end) == ["<|im_end|>", "Ċ"]  # Ċ: the byte-level newline


def test_missing_end_of_turn_by_hand():
    end = [2, 198]
    assert missing_end_of_turn([7, 8], end) == [2, 198]  # cut at max_tokens: the whole end of turn
    assert missing_end_of_turn([7, 2], end) == [198]  # stopped on <|im_end|>: the newline only
    assert missing_end_of_turn([7, 2, 198], end) == []
    assert missing_end_of_turn([], end) == [2, 198]


@given(st.lists(st.integers(0, 5), max_size=6), st.lists(st.integers(0, 5), min_size=1, max_size=3))
def test_a_completion_plus_what_it_misses_ends_with_the_end_of_turn(completion, end):
    missing = missing_end_of_turn(completion, end)
    assert (completion + missing)[-len(end):] == end
    assert len(missing) <= len(end)


def test_a_non_canonical_split_is_kept_and_the_environment_part_follows(tokenizer):
    """The model sampled "search" as "se" + "arch" and was cut at max_tokens: the next prompt keeps those two ids,
    adds <|im_end|> and the newline, then exactly the template's tokens for the environment's reply."""
    split = tokenizer.encode("se", add_special_tokens=False) + tokenizer.encode("arch", add_special_tokens=False)
    assert split != tokenizer.encode("search", add_special_tokens=False)  # a split the tokenizer does not write
    prompt = render_ids(tokenizer, FIRST, None, generation_prompt=True)
    previous = Exchange(tuple(FIRST), tuple(prompt), tuple(split))
    messages = [*FIRST, {"role": "assistant", "content": "search"}, {"role": "user", "content": "Found a key."}]
    ids = next_prompt_ids(tokenizer, previous, messages, None, end_of_turn_ids(tokenizer))
    assert ids[:len(prompt) + 2] == prompt + split
    assert tokenizer.convert_ids_to_tokens(ids[len(prompt) + 2:len(prompt) + 4]) == ["<|im_end|>", "Ċ"]
    assert tokenizer.decode(ids[len(prompt) + 4:]) == "<|im_start|>user\nFound a key.<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(ids) == chat_text(tokenizer, messages)  # the same text the server would render
    assert ids != render_ids(tokenizer, messages, None, generation_prompt=True)  # but not the same tokens


words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 ", min_size=1, max_size=30).map(str.strip).filter(bool)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(words, words, st.booleans()), min_size=1, max_size=3))
def test_canonical_replies_give_exactly_the_rendered_conversation(tokenizer, turns):
    """When every reply was sampled as the tokenizer writes it (ending on <|im_end|> or cut before it), the token
    prompt of each turn equals the server's rendering of the messages: token prompts change nothing then."""
    end = end_of_turn_ids(tokenizer)
    messages = list(FIRST)
    previous = Exchange(tuple(messages), tuple(render_ids(tokenizer, messages, None, True)), ())
    for reply, observation, stopped in turns:
        completion = tokenizer.encode(reply, add_special_tokens=False) + (end[:1] if stopped else [])
        previous = Exchange(previous.messages, previous.prompt_ids, tuple(completion))
        messages = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": observation}]
        ids = next_prompt_ids(tokenizer, previous, messages, None, end)
        assert ids == render_ids(tokenizer, messages, None, generation_prompt=True)
        previous = Exchange(tuple(messages), tuple(ids), ())


def test_a_rewritten_history_falls_back_to_the_servers_rendering(tokenizer):
    end = end_of_turn_ids(tokenizer)
    prompt = tuple(render_ids(tokenizer, FIRST, None, True))
    previous = Exchange(tuple(FIRST), prompt, (123,))
    reply = {"role": "assistant", "content": "open door"}
    windowed = [FIRST[0], {"role": "user", "content": "(earlier turns left out)"}, reply,
                {"role": "user", "content": "It opens."}]
    assert next_prompt_ids(tokenizer, previous, windowed, None, end) is None  # the environment windowed it
    assert next_prompt_ids(tokenizer, previous, [*FIRST, {"role": "user", "content": "again"}], None, end) is None
    assert next_prompt_ids(tokenizer, previous, [*FIRST, reply], None, end) is None  # no environment part


def test_a_template_that_re_renders_the_history_falls_back(tokenizer):
    """A template that drops earlier assistant turns (as reasoning templates drop earlier thinking) renders the
    conversation so far differently once more messages follow: no token prompt can extend it."""
    import copy

    forgetful = copy.deepcopy(tokenizer)
    forgetful.chat_template = (
        "{%- for m in messages -%}{%- if m.role != 'assistant' or loop.index0 >= messages|length - 1 -%}"
        "{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif -%}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}")
    prompt = tuple(render_ids(forgetful, FIRST, None, True))
    messages = [*FIRST, {"role": "assistant", "content": "open door"}, {"role": "user", "content": "It opens."}]
    assert next_prompt_ids(forgetful, Exchange(tuple(FIRST), prompt, (123,)), messages, None,
                           end_of_turn_ids(forgetful)) is None


def test_a_server_without_token_ids_gets_plain_requests_and_seeds_still_apply(tokenizer):
    """ScriptedClient answers without ids (as a non-vLLM server would): every request goes out as messages; the
    seeded view still adds its seed to each."""
    env = load_environment(num_examples=2, max_turns=2)
    client = ScriptedClient(["apple", "banana"])
    rows = number_rollouts(env.get_dataset(n=2).repeat(2).to_list())
    with seeded_rollouts(env, 0, "train"), token_prompt_rollouts(env, tokenizer):
        asyncio.run(env.generate(rows, client=client, model="m", use_tqdm=False))
    assert len(client.requests) == 8
    assert all(sent_prompt_ids(r) is None and "seed" in r for r in client.requests)
    assert "rollout" not in vars(env)  # both blocks undone


# ---------------------------------------------------------------- against the real server


@pytest.mark.slow
def test_every_rollout_is_one_token_sequence_with_token_prompts_and_not_without(tiny_server, tiny_model, tmp_path):
    """tiny-random samples near-uniformly over the vocabulary, so its replies are full of splits the tokenizer
    would not write: rendered from messages, some two-turn rollouts are not one token sequence; with token prompts
    every one is, and the server was prompted with exactly the ids the trainer packs."""
    from transformers import AutoTokenizer

    from rlvr.trainer.rollout_client import RolloutClient

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    args = config(str(tmp_path), 1, max_tokens_per_turn=8)
    env = load_environment(num_examples=4, max_turns=2)
    rows = env.get_dataset()

    def rollouts(token_prompts: bool):
        client = RolloutClient(tiny_server.url, "tiny-random", tokenizer, sampling_args=args.sampling_args,
                               max_concurrent=16, timeout=120, sync="cpu", sampling_seed=0,
                               token_prompts=token_prompts)
        try:
            return client.generate(env, rows, 4).rollouts
        finally:
            client.close()

    plain = rollouts(False)
    assert len(plain) == 16 and all(len(r.turns) == 2 for r in plain)
    assert sum(prefix_mismatch([t.tokens for t in r.turns]) is not None for r in plain) >= 1  # 3 of 16 here
    kept = rollouts(True)
    assert len(kept) == 16 and all(len(r.turns) == 2 for r in kept)
    assert [prefix_mismatch([t.tokens for t in r.turns]) for r in kept] == [None] * 16
    # the first turn is rendered as before: the same seeds sample the same first replies
    assert [r.turns[0].tokens.completion_ids for r in kept] == [r.turns[0].tokens.completion_ids for r in plain]


def test_a_native_tool_call_turn_is_followed_by_the_tool_response_as_the_template_writes_it(tokenizer):
    """The model's tool call as it sampled it, then the template's tool response block (rlvr's hermes template on
    SmolLM2's tokens): canonical ids give exactly the server's rendering of the messages."""
    end = end_of_turn_ids(tokenizer)
    tools = [{"type": "function", "function": {"name": "python", "description": "Run code.",
                                               "parameters": {"type": "object", "properties": {
                                                   "code": {"type": "string"}}, "required": ["code"]}}}]
    first = [{"role": "user", "content": "What is 6 * 7?"}]
    call = {"id": "call_0", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(6*7)"}'}}
    messages = [*first, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_0", "content": "42"}]
    sampled_text = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'
    prompt = render_ids(tokenizer, first, tools, generation_prompt=True)
    completion = tokenizer.encode(sampled_text, add_special_tokens=False) + end[:1]
    ids = next_prompt_ids(tokenizer, Exchange(tuple(first), tuple(prompt), tuple(completion)), messages, tools, end)
    assert ids == render_ids(tokenizer, messages, tools, generation_prompt=True)
    assert tokenizer.decode(ids).endswith("<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
