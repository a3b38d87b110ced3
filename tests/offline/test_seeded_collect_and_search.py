"""`rlvr collect` and value-guided search (`rlvr evaluate --search`) sample with seeds (rlvr.seeding): the search's
own requests carry seeds derived from the request it answers; against the real tiny-random server, the same --seed
gives the same completions and another seed other ones."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import verifiers  # noqa: F401  (imported before the runner swaps stderr: its log handler keeps the real one)
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.offline.search import SearchConfig, ValueGuidedClient
from rlvr.seeding import derived_seed, request_seed

ENV_ARGS = json.dumps({"num_train_examples": 2, "num_eval_examples": 2})


def test_derived_seeds_are_pinned_and_apart_from_request_seeds():
    assert derived_seed(7, 0, 1) == derived_seed(7, 0, 1) != derived_seed(7, 1, 0)
    assert derived_seed(5, 2, 3) == 332008715  # a change here changes every seeded search
    assert 0 <= derived_seed(2**40, 3, 9) < 2**31
    assert derived_seed(0, 0, 0, 0, 0) != request_seed(0, "derived", 0, 0, 0, 0)


class _Values:
    def values(self, texts):
        return [float(len(t)) for t in texts]  # the longest candidate wins


def _searched_bodies(mode: str, seed: int | None) -> list[dict]:
    """The request bodies a search sends for one chat request with `seed` (a fake server: one fixed step)."""
    from transformers import AutoTokenizer

    from rlvr import models

    bodies = []

    def reply(request):
        body = json.loads(request.content)
        bodies.append(body)
        ends = len(bodies) > 2  # two steps of beam search, then every candidate finishes
        return httpx.Response(200, json={"choices": [
            {"text": "step\n" if not ends else "end", "stop_reason": None if ends else "\n"}
            for _ in range(body["n"])]})

    tokenizer = AutoTokenizer.from_pretrained(models.resolve("tiny-random"))
    client = ValueGuidedClient("http://fake/v1", "m", tokenizer, _Values(), SearchConfig(mode=mode, width=2))
    client._http = httpx.AsyncClient(transport=httpx.MockTransport(reply))
    args = {"max_tokens": 64, **({"seed": seed} if seed is not None else {})}
    asyncio.run(client.create(model="m", messages=[{"role": "user", "content": "hi"}], **args))
    return bodies


def test_the_search_seeds_its_own_requests_from_the_request_it_answers():
    assert [b["seed"] for b in _searched_bodies("best_of_k", 11)] == [11]  # K samples in one request: vLLM seeds
    beam = _searched_bodies("beam", 11)
    # step 0: one beam; step 1: two beams (b = 0, 1, sent concurrently); later requests finish every candidate
    assert beam[0]["seed"] == derived_seed(11, 0, 0)
    assert {b["seed"] for b in beam[1:3]} == {derived_seed(11, 1, 0), derived_seed(11, 1, 1)}
    assert all("seed" not in b for b in _searched_bodies("beam", None))  # unseeded stays unseeded


def ok(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, f"{result.output[-3000:]}\n{result.exception!r}"
    return result


def collected(tmp_path, server, seed: int, name: str) -> list:
    out = tmp_path / name
    ok("collect", "--env", "vf-arithmetic", "--env-args", ENV_ARGS, "--model", "tiny-random", "--endpoint", server.url,
       "-r", "2", "--max-tokens", "8", "--seed", seed, "-o", out)
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 4 and json.loads((out / "collect.json").read_text())["seed"] == seed
    return sorted((r["example_id"], r["sample_index"], json.dumps(r["completion"])) for r in records)


def searched(tmp_path, server, value_model, seed: int, name: str) -> list:
    out = tmp_path / name
    ok("evaluate", "--env", "vf-arithmetic", "--env-args", ENV_ARGS, "--endpoint", server.url, "-n", "2", "-r", "2",
       "--max-tokens", "8", "--search", "beam", "--value-model", value_model, "--beam-width", "2", "--seed", seed,
       "-o", out)
    assert json.loads((out / "metadata.json").read_text())["sampling_seed"] == seed
    return [json.loads(line)["completion"] for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_same_seed_collects_and_searches_the_same_completions(tmp_path, tiny_server, tiny_model):
    first = collected(tmp_path, tiny_server, 0, "a")
    assert collected(tmp_path, tiny_server, 0, "b") == first
    assert collected(tmp_path, tiny_server, 1, "c") != first
    assert len({c for *_, c in first}) > 1  # the rollouts of a group differ: each request has its own seed

    # a value model for the search: tiny-random's body with a one-output head (random: it ranks candidates)
    from transformers import AutoTokenizer

    from rlvr.offline.oreo import load_value_model

    value_model = tmp_path / "value"
    load_value_model(str(tiny_model)).save_pretrained(value_model)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(value_model)
    first = searched(tmp_path, tiny_server, value_model, 0, "s0")
    assert searched(tmp_path, tiny_server, value_model, 0, "s0-again") == first
    assert searched(tmp_path, tiny_server, value_model, 1, "s1") != first
