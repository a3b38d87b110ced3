"""`rlvr serve` against the shared session servers (tiny-random, SmolLM2-135M): tokens, logprobs, tools, protocol."""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest
import verifiers as vf
from datasets import Dataset
from openai import AsyncOpenAI
from transformers import AutoTokenizer
from verifiers.utils.response_utils import parse_response_tokens

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]
# Rollout requests ask vLLM for token ids; verifiers' trainer reads them through parse_response_tokens.
TOKENS = {"return_token_ids": True}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module", params=["tiny_server", "smol_server"])  # module: pytest runs each server's tests
def server(request):  # together, so the SmolLM2 server is started once (conftest.SessionServer)
    return request.getfixturevalue(request.param)


async def chat(server, messages=MESSAGES, **kwargs):
    async with AsyncOpenAI(base_url=server.base_url, api_key="local") as client:
        return await client.chat.completions.create(
            model=server.model,
            messages=messages,
            max_tokens=kwargs.pop("max_tokens", 12),
            temperature=0.0,
            logprobs=True,
            extra_body={**TOKENS, **kwargs.pop("extra_body", {})},
            **kwargs,
        )


def test_chat_token_ids_and_logprobs_parse_with_verifiers(server):
    response = run(chat(server))
    tokens = run(parse_response_tokens(response, "chat"))
    assert tokens is not None, (
        "verifiers found no token ids/logprobs in the response: the trainer would train on nothing"
    )

    tokenizer = AutoTokenizer.from_pretrained(_model_dir(server))
    expected_prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    expected_prompt = (
        expected_prompt["input_ids"] if not isinstance(expected_prompt, list) else expected_prompt
    )
    assert tokens["prompt_ids"] == list(expected_prompt)
    assert tokens["prompt_mask"] == [0] * len(expected_prompt)
    completion = tokens["completion_ids"]
    assert len(completion) == response.usage.completion_tokens > 0
    assert tokens["completion_mask"] == [1] * len(completion)
    assert len(tokens["completion_logprobs"]) == len(completion)
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in tokens["completion_logprobs"])
    # The completion ids are the text the server returned (up to the eos token, which the text omits).
    assert tokenizer.decode(completion, skip_special_tokens=True) == response.choices[0].message.content


def test_completions_token_ids_parse_with_verifiers(tiny_server):
    async def complete():
        async with AsyncOpenAI(base_url=tiny_server.base_url, api_key="local") as client:
            return await client.completions.create(
                model=tiny_server.model, prompt="The capital of France is", max_tokens=6, temperature=0.0,
                logprobs=1, extra_body=TOKENS,
            )  # fmt: skip

    response = run(complete())
    tokens = run(parse_response_tokens(response, "completion"))
    assert tokens is not None
    assert len(tokens["prompt_ids"]) > 0
    assert len(tokens["completion_ids"]) == len(tokens["completion_logprobs"]) == 6


def test_greedy_is_deterministic(server):
    first, second = run(chat(server, max_tokens=16)), run(chat(server, max_tokens=16))
    assert first.choices[0].token_ids == second.choices[0].token_ids
    first_lp = [t.logprob for t in first.choices[0].logprobs.content]
    second_lp = [t.logprob for t in second.choices[0].logprobs.content]
    assert first_lp == pytest.approx(second_lp, abs=1e-5)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first integer
        b: second integer
    """
    return a + b


# The model's output is constrained to exactly this Hermes tool call, so the test exercises the server's hermes
# tool parser (not the model's skill): without `--tool-call-parser hermes` the call would stay plain text.
FORCED_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


def _regex_literal(text: str) -> str:
    return "".join("\\" + c if c in "{}[]()\\.*+?^$|" else c for c in text)


def test_tool_env_rollout_gets_parsed_tool_calls(tiny_server):
    dataset = Dataset.from_list([{"question": "What is 2 + 3? Use the add tool.", "answer": "5"}])
    env = vf.ToolEnv(tools=[add], dataset=dataset, max_turns=2)
    sampling = {
        "temperature": 0.0,
        "max_tokens": 64,
        "logprobs": True,
        "extra_body": {**TOKENS, "structured_outputs": {"regex": _regex_literal(FORCED_CALL)}},
    }
    row = env.get_dataset()[0]

    async def rollout():
        async with AsyncOpenAI(base_url=tiny_server.base_url, api_key="local") as client:
            return await env.rollout(
                {"prompt": row["prompt"], "answer": row["answer"], "task": "default", "example_id": 0},
                client,
                tiny_server.model,
                sampling,
            )

    state = run(rollout())
    assert state.get("error") is None, state.get("error")
    first_turn = state["trajectory"][0]
    assistant = first_turn["completion"][0]
    [call] = assistant["tool_calls"]
    assert call["function"]["name"] == "add"
    assert json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    assert first_turn["tokens"] is not None and len(first_turn["tokens"]["completion_ids"]) > 0
    tool_messages = [m for m in state["completion"] if m["role"] == "tool"]
    assert tool_messages and tool_messages[0]["content"] == "5"


def test_nccl_endpoints_on_cpu_name_the_cpu_transport(tiny_server):
    from verifiers.rl.inference.client import VLLMClient

    client = VLLMClient(host="127.0.0.1", port=tiny_server.port, connection_timeout=10)
    with pytest.raises(Exception, match="CPUWeightSyncClient"):
        client.init_communicator()  # GET /get_world_size answers; POST /init_communicator refuses on CPU
    assert client.get_num_background_tasks() == 0
    client.reset_prefix_cache()
    for path in ("/update_named_param", "/close_communicator"):
        response = httpx.post(
            tiny_server.url + path, json={"name": "x", "dtype": "torch.float32", "shape": [1]}
        )
        assert response.status_code == 501
        assert "CPU" in response.json()["error"]
    assert httpx.get(tiny_server.url + "/get_world_size").json() == {"world_size": 1}


def test_served_model_name_is_the_given_name(tiny_server):
    models = httpx.get(tiny_server.base_url + "/models").json()["data"]
    assert [m["id"] for m in models] == ["tiny-random"]


def _model_dir(server) -> str:
    from rlvr.models import resolve

    return resolve(server.model)
