"""Seeded sampling: every model request of a rollout carries a seed derived from where it sits in the run, so the
same run seed gives the same samples whatever order concurrent requests reach the server in.

vLLM samples a request that has a `seed` (OpenAI `seed`, vLLM `SamplingParams.seed`) with a random generator of its
own, seeded with it; requests without one share the engine's generator, whose draws go to whichever request the
scheduler batches first. The seed of a request is `request_seed(run seed, stream, batch, example id, rollout of the
example, request of the rollout)`: a pure function of what the request is, not of when it is sent.

The hook, environment-agnostic: `seeded_rollouts(env, ...)` replaces the environment's `rollout` for the duration
of one `generate` (verifiers' `Environment.run_rollout` calls `self.rollout(input, client, ...)` once per rollout, in
its own task) by one that hands the rollout a `SeededClient`: a view of the OpenAI client whose `create` adds the
next seed of that rollout. verifiers reads the client from the rollout's state (`get_model_response`), so every
request of the rollout, through any environment class (EnvGroup routes `rollout` to its members), goes through it.
The rollout's number within its example's group is a field of its input (`number_rollouts`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

ROLLOUT_FIELD = "rollout_of_example"  # input field: the rollout's number within its example's group, from 0
SEED_BITS = 31  # seeds fit a signed 32-bit integer: what every OpenAI-compatible server accepts


def request_seed(run_seed: int, stream: str, batch: int, example_id: int, rollout: int, request: int) -> int:
    """The sampling seed of one model request, in [0, 2**31).

    run_seed: the run's seed; stream: what the requests are for ("train", "eval", ...), so that an evaluation and a
    training batch of the same seed draw differently; batch: the training batch (0 for an evaluation); example_id:
    the dataset row; rollout: the rollout's number among the example's rollouts; request: the model call's number
    within the rollout (its turn, from 0). BLAKE2b (hashlib, RFC 7693) of the canonical JSON of the tuple, the
    first 8 bytes read big-endian and cut to 31 bits: stable across processes, machines and Python versions
    (Python's hash() of a str is salted per process)."""
    return _hash31([int(run_seed), str(stream), int(batch), int(example_id), int(rollout), int(request)])


def derived_seed(seed: int, *path: int) -> int:
    """The seed of one of several requests made on behalf of one seeded request (a value-guided search samples each
    step of each beam in a request of its own: path = (step, beam)), in [0, 2**31); the same hash as request_seed,
    of a key that no request_seed key equals (its string comes first)."""
    return _hash31(["derived", int(seed), *(int(p) for p in path)])


def _hash31(key: list) -> int:
    text = json.dumps(key, separators=(",", ":"))
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def number_rollouts(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the rows with ROLLOUT_FIELD set: how many earlier rows have the same example_id (so the rollouts of
    one example are numbered 0, 1, ... in the order they are listed, which is how verifiers groups them)."""
    seen: dict[int, int] = {}
    numbered = []
    for row in rows:
        if "example_id" not in row:
            raise ValueError(f"a rollout input without example_id (keys {sorted(row)}): verifiers' formatted "
                             "datasets have one; pass rows of env.get_dataset() / env.get_eval_dataset()")
        index = seen.get(row["example_id"], 0)
        seen[row["example_id"]] = index + 1
        numbered.append({**row, ROLLOUT_FIELD: index})
    return numbered


class _Endpoint:
    """`client.chat.completions` or `client.completions` of a ClientView: `create` is the view's."""

    def __init__(self, endpoint, create):
        self._endpoint = endpoint
        self.create = create

    def __getattr__(self, name: str):
        return getattr(self._endpoint, name)


class _Chat:
    def __init__(self, chat, create):
        self._chat = chat
        self.completions = _Endpoint(chat.completions, create)

    def __getattr__(self, name: str):
        return getattr(self._chat, name)


class ClientView:
    """An AsyncOpenAI client whose chat completion `create` is `chat_create` and, when given, text completion
    `create` is `text_create` (each called with the request's keyword arguments); everything else is the client's
    own. A rollout's views (`rollout_client_views`) are built on it: SeededClient, rlvr.token_prompts."""

    def __init__(self, client, chat_create, text_create=None):
        self._client = client
        self.chat = _Chat(client.chat, chat_create)
        if text_create is not None:
            self.completions = _Endpoint(client.completions, text_create)

    def __getattr__(self, name: str):
        return getattr(self._client, name)


class SeededClient(ClientView):
    """One rollout's view of an AsyncOpenAI client: each chat or text completion request gets the next seed of
    `seeds` (a derived seed replaces one in the sampling arguments: one fixed seed would make a group's rollouts
    identical); everything else is the client's own."""

    def __init__(self, client, seeds: Iterator[int]):
        def seeded(endpoint):
            async def create(**kwargs):
                return await endpoint.create(**{**kwargs, "seed": next(seeds)})

            return create

        super().__init__(client, seeded(client.chat.completions), seeded(client.completions))


def rollout_seeds(run_seed: int, stream: str, batch: int, example_id: int, rollout: int) -> Iterator[int]:
    """The seeds of one rollout's requests, in order."""
    request = 0
    while True:
        yield request_seed(run_seed, stream, batch, example_id, rollout, request)
        request += 1


@contextmanager
def seeded_rollouts(env, run_seed: int | None, stream: str, batch: int = 0):
    """Within the block, every rollout of `env` samples with seeds from `request_seed` (inputs numbered by
    `number_rollouts`). run_seed None: unseeded sampling, the environment untouched."""
    if run_seed is None:
        yield env
        return

    def seeded(input, client):
        if ROLLOUT_FIELD not in input:
            raise ValueError(f"rollout input of example {input.get('example_id')} has no {ROLLOUT_FIELD!r}: "
                             "number the inputs with rlvr.seeding.number_rollouts before generate()")
        return SeededClient(client, rollout_seeds(run_seed, stream, batch, input["example_id"], input[ROLLOUT_FIELD]))

    with rollout_client_views(env, seeded):
        yield env


@contextmanager
def rollout_client_views(env, view):
    """Within the block, each rollout of `env` talks to `view(input, client)` instead of the client (`env.generate`
    passes one client to all rollouts; a view keeps what belongs to one rollout: its seeds, its token history).

    verifiers' `Environment.run_rollout` calls `self.rollout(input, client, ...)` once per rollout, in its own task;
    the hook is an instance attribute `rollout` (found before the class's method) for the duration of the block.
    Blocks nest: a view wraps the client the enclosing block's view was given."""
    original = env.rollout

    async def rollout(input, client, model, sampling_args=None):
        return await original(input, view(input, client), model, sampling_args)

    own = vars(env).get("rollout")  # an instance attribute of its own (a block within another)
    env.rollout = rollout
    try:
        yield env
    finally:
        if own is None:
            del env.rollout
        else:
            env.rollout = own
