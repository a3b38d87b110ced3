"""The trainer's side of a rollout server (`RolloutClient`): start-up checks with actionable errors, rollouts of an
environment as `Rollout` records, and the weight-sync transport.

Weights go to the server as (name, tensor) pairs from `policy.served_tensors` (LoRA merged out of place):
CPU: all of them at once to `rlvr serve` through `rlvr.serve.CPUWeightSyncClient` (a file in /dev/shm);
GPU: one tensor at a time over verifiers' NCCL protocol (`VLLMClient.update_named_param`, then the prefix cache is
reset), as verifiers' `RLTrainer.update_vllm` sends them.

Rollouts are sampled with per-request seeds derived from the run seed (`rlvr.seeding`) unless `sampling_seed` is
None: the same seed, batch and weights give the same completions whatever order the requests are sent in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import torch
import verifiers as vf
from datasets import Dataset
from openai import AsyncOpenAI

from rlvr.rollouts import Rollout, from_state
from rlvr.seeding import number_rollouts, seeded_rollouts
from rlvr.serve.protocol import (
    ADMIN_HEADER,
    ADMIN_TOKEN_ENV,
    WEIGHT_VERSION_FIELD,
    WEIGHT_VERSION_PATH,
    ServerError,  # re-exported: rlvr.trainer's callers catch it from here
)
from rlvr.token_prompts import token_prompt_rollouts


def start_command(model: str, port: int | str) -> str:
    return f"rlvr serve --model {model} --port {port}"


def check_server(url: str, model: str, tokenizer, timeout: float = 10.0) -> str:
    """Fail early and clearly: the server answers, serves a model, and tokenises chats like the trainer.

    Returns the served model name to use in requests.
    """
    root = url.rstrip("/").removesuffix("/v1")
    port = root.rsplit(":", 1)[-1]
    try:
        httpx.get(f"{root}/health", timeout=timeout).raise_for_status()
        served = [m["id"] for m in httpx.get(f"{root}/v1/models", timeout=timeout).json()["data"]]
    except (httpx.HTTPError, KeyError, ValueError) as e:
        raise ServerError(
            f"the rollout server at {root} is unreachable ({type(e).__name__}: {e}).\n"
            f"  start one:  {start_command(model, port)}\n"
            f"  or leave out --server (server_url=None in Python): rlvr then starts its own"
        ) from e
    if not served:
        raise ServerError(f"the server at {root} serves no model")
    name = model if model in served else served[0]
    probe = [{"role": "system", "content": "probe"}, {"role": "user", "content": "Hello, 1 + 1 = ?"}]
    response = httpx.post(f"{root}/tokenize", json={"model": name, "messages": probe,
                                                     "add_generation_prompt": True}, timeout=timeout)
    response.raise_for_status()
    server_ids = response.json()["tokens"]
    trainer_ids = list(tokenizer.apply_chat_template(probe, tokenize=True, add_generation_prompt=True,
                                                     return_dict=False))
    if server_ids != trainer_ids:
        raise ServerError(
            f"the served model {name!r} tokenises a chat differently from the trainer's tokenizer "
            f"(server {server_ids[:12]}... vs trainer {trainer_ids[:12]}...): serve the same model as you train "
            f"({start_command(model, port)})"
        )
    return name


def check_token_ids(url: str, model: str, sampling_args: dict, timeout: float = 60.0) -> None:
    """One 1-token request with the training sampling args: the answer must carry token ids and logprobs.

    Without them verifiers' parse_response_tokens either returns None (the trainer would train on nothing) or
    fails deep inside a rollout; here the cause is named before any generation.
    """
    root = url.rstrip("/").removesuffix("/v1")
    body = {k: v for k, v in sampling_args.items() if k != "extra_body"}
    body.update(sampling_args.get("extra_body") or {})
    body.update(model=model, max_tokens=1, messages=[{"role": "user", "content": "Hi"}])
    response = httpx.post(f"{root}/v1/chat/completions", json=body, timeout=timeout)
    response.raise_for_status()
    answer = response.json()
    choice = answer["choices"][0]
    if not answer.get("prompt_token_ids") or not choice.get("token_ids") or not choice.get("logprobs"):
        raise missing_token_ids_error(root)


def missing_token_ids_error(url: str) -> ServerError:
    return ServerError(
        f"the rollout server at {url} returned no token ids or logprobs, so there is nothing to train on. "
        "vLLM returns them when the request sets extra_body.return_token_ids=True and logprobs=True "
        "(MTGRPOConfig.sampling_args does) and the server supports `return_token_ids` (vLLM >= 0.10.2; "
        "`rlvr serve` does). Check that the URL points at a vLLM server, not another OpenAI-compatible one."
    )


def server_prompt_logprobs(url: str, model: str, input_ids: list[int], timeout: float = 60.0) -> list[float]:
    """The server's logprob of each token of `input_ids` given the previous ones (vLLM `prompt_logprobs`)."""
    root = url.rstrip("/").removesuffix("/v1")
    response = httpx.post(f"{root}/v1/completions", json={
        "model": model, "prompt": input_ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0,
    }, timeout=timeout)
    response.raise_for_status()
    entries = response.json()["choices"][0]["prompt_logprobs"]
    # entries[i] maps token ids (as strings) to {"logprob": ...}; entry 0 is None (no context).
    return [entry[str(tok)]["logprob"] for tok, entry in zip(input_ids[1:], entries[1:], strict=True)]


def send_over_nccl(client, named_tensors: Iterable[tuple[str, torch.Tensor]], poll_s: float = 0.5) -> None:
    """verifiers' NCCL weight update (RLTrainer.update_vllm, verifiers/rl/trainer/trainer.py): each tensor is
    broadcast with `update_named_param`, then the server's prefix cache (KV computed with the old weights) is reset
    and the server's background tasks are awaited."""
    for name, tensor in named_tensors:
        client.update_named_param(name, tensor)
    client.reset_prefix_cache()
    while client.get_num_background_tasks() > 0:
        time.sleep(poll_s)


def served_weight_version(url: str, timeout: float = 30.0) -> int | None:
    """The server's current weight version (`rlvr serve`'s GET /rlvr/weight_version); None from a server without it
    (another vLLM server: its answers carry no version tags either)."""
    try:
        response = httpx.get(f"{url}{WEIGHT_VERSION_PATH}", timeout=timeout)
    except httpx.HTTPError:
        return None
    return int(response.json()[WEIGHT_VERSION_FIELD]) if response.status_code == 200 else None


def renumber_versions(rollout: Rollout, policy_versions: Mapping[int, int]) -> Rollout:
    """The rollout with each turn's server weight versions replaced by the trainer's policy versions; a version the
    trainer did not send (the server's weights before the first sync) becomes None, as an untagged turn."""
    turns = []
    for turn in rollout.turns:
        versions = turn.weight_versions
        if versions is not None:
            mapped = tuple(policy_versions.get(v) for v in versions)
            versions = None if None in mapped else mapped
        turns.append(dataclasses.replace(turn, weight_versions=versions))
    return dataclasses.replace(rollout, turns=tuple(turns))


@dataclass(frozen=True)
class GeneratedBatch:
    rollouts: list[Rollout]
    generation_s: float  # wall time of generate(), scoring included
    scoring_s: float  # time the rubrics spent scoring (groups are scored as they finish, so it overlaps generation)
    generation_rounds: int = 1  # filter_groups: rounds of prompts rolled out for this batch
    dropped_groups: int = 0  # filter_groups: groups left out because their rollouts all got one outcome


def nccl_client(url: str, connection_timeout: float = 300.0):
    """verifiers' `VLLMClient` for the NCCL weight sync (call its `init_communicator`). A server on another host
    guards its weight-changing routes with an admin token (`rlvr serve --admin-token`, docs/multinode.md); verifiers'
    client sends none, so its session carries the token from $RLVR_ADMIN_TOKEN, as rlvr's CPU client does."""
    from verifiers.rl.inference.client import VLLMClient

    host, port = url.removeprefix("http://").rsplit(":", 1)
    client = VLLMClient(host=host, port=int(port), connection_timeout=connection_timeout)
    token = os.environ.get(ADMIN_TOKEN_ENV)
    if token:
        client.session.headers[ADMIN_HEADER] = token
    return client


class RolloutClient:
    """One rollout server as the trainer sees it: checked at construction, then asked for rollouts and weights."""

    def __init__(self, url: str, model: str, tokenizer, *, sampling_args: Mapping[str, Any], max_concurrent: int,
                 timeout: float, sync: str, connection_timeout: float = 300.0, sampling_seed: int | None = None,
                 token_prompts: bool = False):
        self.url = url.rstrip("/").removesuffix("/v1")
        self.model = check_server(self.url, model, tokenizer)
        self.tokenizer = tokenizer
        self.token_prompts = token_prompts  # turns after the first prompted with the sampled ids (rlvr.token_prompts)
        check_token_ids(self.url, self.model, dict(sampling_args))
        self.sampling_args = dict(sampling_args)
        self.max_concurrent = max_concurrent
        self.sampling_seed = sampling_seed  # None: the server's unseeded sampling
        # the server's weight version -> the trainer's policy version, filled by update_weights (written on the
        # trainer's thread while a producer thread may read it: generate copies it)
        self.policy_versions: dict[int, int] = {}
        self._loop = asyncio.new_event_loop()
        self._openai = AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key="EMPTY",
            http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=max_concurrent), timeout=timeout),
        )
        self.cpu_sync = None
        self.nccl = None  # verifiers' VLLMClient
        if sync == "cpu":
            from rlvr.serve import CPUWeightSyncClient

            self.cpu_sync = CPUWeightSyncClient(self.url)
        else:
            self.nccl = nccl_client(self.url, connection_timeout)
            self.nccl.init_communicator()

    def generate(self, env: vf.Environment, rows: Dataset, rollouts_per_example: int, *,
                 batch: int = 0) -> GeneratedBatch:
        """`rollouts_per_example` rollouts of each row, scored group by group by the environment's rubric (verifiers'
        `generate` groups the rollouts of one example and scores each group when it finishes). `batch`: the
        training batch's index, part of every request's sampling seed."""
        from rlvr.v1.env import V1Environment  # lazily: only v1 runs need the bridge

        start = time.perf_counter()
        if isinstance(env, V1Environment):  # a verifiers v1 environment: its episodes run in the bridge (rlvr.v1)
            rollouts = env.rollouts(rows, rollouts_per_example, url=self.url, model=self.model,
                                    model_path=self.tokenizer.name_or_path, sampling_args=self.sampling_args,
                                    max_concurrent=self.max_concurrent, seed=self.sampling_seed, batch=batch)
            return GeneratedBatch(rollouts, time.perf_counter() - start, 0.0)
        inputs = number_rollouts(rows.repeat(rollouts_per_example).to_list())
        with (seeded_rollouts(env, self.sampling_seed, "train", batch),
              token_prompt_rollouts(env, self.tokenizer, self.token_prompts)):
            outputs = self._loop.run_until_complete(env.generate(
                inputs, client=self._openai, model=self.model, sampling_args=dict(self.sampling_args),
                max_concurrent=self.max_concurrent, use_tqdm=False,
            ))
        generation_s = time.perf_counter() - start
        states = outputs["state"]
        per_group = {s["example_id"]: s["timing"].get("scoring_ms", 0.0) for s in states}
        versions = dict(self.policy_versions)  # one copy (a C-level copy under the GIL: the sync thread may add)
        rollouts = [renumber_versions(from_state(s), versions) for s in states]
        return GeneratedBatch(rollouts, generation_s, sum(per_group.values()) / 1000)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], policy_version: int) -> None:
        """Load the weights into the server; returns once it generates with them. `policy_version` is the trainer's
        number for these weights: the server's own version tag is mapped to it (`policy_versions`)."""
        if self.cpu_sync is not None:
            # written out before the call returns: no copies
            server_version = self.cpu_sync.update_weights(dict(named_tensors)).get(WEIGHT_VERSION_FIELD)
        else:
            send_over_nccl(self.nccl, named_tensors)
            server_version = served_weight_version(self.url)
        if server_version is not None:
            self.policy_versions[int(server_version)] = policy_version

    def close(self) -> None:
        self._loop.run_until_complete(self._openai.close())
        self._loop.close()
        if self.cpu_sync is not None:
            self.cpu_sync.close()  # frees the weights file it keeps in /dev/shm between updates
