"""CPU weight sync into a running server (file and http transports), and the admin token, on one server of our own.

The shared session servers must keep their weights, so this module starts its own tiny-random server, bound to
0.0.0.0 (a non-loopback address, so the admin token is enforced) and reached through 127.0.0.1, so the client's
default transport is the file one. In vLLM's CPU layout (`--cpu-engine worker`, the product's default; the suite's
other servers run the model inline): the update reaches a worker process through the engine core's RPC.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import httpx
import pytest
import torch
from openai import AsyncOpenAI
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from rlvr.serve import ADMIN_HEADER, CPUWeightSyncClient, WeightSyncError, launch
from rlvr.serve.launch import group_processes

pytestmark = pytest.mark.slow

TOKEN = secrets.token_hex(16)
MESSAGES = [{"role": "user", "content": "Count from one to five."}]
# fp32 on both sides (see sync_server), so only summation order differs.
LOGPROB_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def allowed_dir(tmp_path_factory) -> Path:
    """A root the server is told to load weight files from (rlvr serve --allow-weights-dir)."""
    return tmp_path_factory.mktemp("allowed-weights")


@pytest.fixture(scope="module")
def sync_server(tiny_model, tmp_path_factory, allowed_dir):
    with launch(
        "tiny-random",
        # vLLM on CPU serves a float32 checkpoint in bfloat16 by default (logprobs then differ from an fp32
        # forward by ~5e-3, measured); float32, the trainer's dtype, makes the comparison with transformers tight.
        dtype=torch.float32,
        extra_args=["--allow-weights-dir", str(allowed_dir), "--cpu-engine", "worker"],
        host="0.0.0.0",
        admin_token=TOKEN,
        log_file=tmp_path_factory.mktemp("serve") / "serve.log",
    ) as server:
        yield server
    assert group_processes(server.pid) == [], "a process of the server's group outlived launch()"


@pytest.fixture(scope="module")
def perturbed_state(tiny_model) -> dict[str, torch.Tensor]:
    """tiny-random with seeded Gaussian noise on every parameter: stands in for the weights after a training step."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    generator = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    return model.state_dict()


def model_logprobs(
    state: dict[str, torch.Tensor], tiny_model, prompt_ids: list[int], completion_ids: list[int]
):
    """log p(completion_ids[i] | prefix) under `state`, by a transformers forward pass (teacher forcing)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model.load_state_dict(state)
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    # The logits at position t predict token t + 1.
    positions = range(len(prompt_ids) - 1, len(prompt_ids) + len(completion_ids) - 1)
    return [logprobs[p, t].item() for p, t in zip(positions, completion_ids, strict=True)]


async def greedy(server, max_tokens: int, ignore_eos: bool = False):
    async with AsyncOpenAI(base_url=server.base_url, api_key="local") as client:
        response = await client.chat.completions.create(
            model=server.model,
            messages=MESSAGES,
            max_tokens=max_tokens,
            temperature=0.0,
            logprobs=True,
            extra_body={"return_token_ids": True, "ignore_eos": ignore_eos},
        )
    choice = response.choices[0]
    versions = (response.weight_version, response.weight_version_end)  # rlvr.serve.versions' tags
    return response.prompt_token_ids, choice.token_ids, [t.logprob for t in choice.logprobs.content], versions


def original_state(tiny_model) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).state_dict()


@pytest.mark.parametrize(
    "path",
    ["/rlvr/update_weights", "/rlvr/update_weights_from_path", "/reset_prefix_cache", "/init_communicator"],
)
def test_admin_endpoints_refuse_requests_without_the_token(sync_server, path):
    for headers in ({}, {ADMIN_HEADER: "wrong-" + TOKEN}):
        response = httpx.post(sync_server.url + path, content=b"x", headers=headers)
        assert response.status_code == 403
        assert ADMIN_HEADER in response.json()["error"]
    for transport in ("file", "http"):
        with pytest.raises(WeightSyncError, match="403"):
            CPUWeightSyncClient(sync_server.url, admin_token="", transport=transport).update_weights(
                {"w": torch.zeros(1)}
            )


def test_admin_token_opens_admin_endpoints_and_inference_needs_none(sync_server):
    assert (
        httpx.post(sync_server.url + "/reset_prefix_cache", headers={ADMIN_HEADER: TOKEN}).status_code == 200
    )
    assert httpx.get(sync_server.url + "/health").status_code == 200
    _, completion, _, _ = asyncio.run(greedy(sync_server, max_tokens=2))
    assert len(completion) > 0


def test_a_body_that_is_not_safetensors_is_refused_with_a_clear_error(sync_server):
    response = httpx.post(
        sync_server.url + "/rlvr/update_weights",
        content=b"not a safetensors file",
        headers={ADMIN_HEADER: TOKEN},
    )
    assert response.status_code == 400
    assert "safetensors" in response.json()["error"]


@pytest.mark.parametrize(("transport", "used"), [("auto", "file"), ("http", "http")])
def test_update_matches_a_transformers_forward_of_the_new_weights(
    sync_server, tiny_model, perturbed_state, transport, used
):
    # Default arguments, as the trainer calls it: on a loopback URL "auto" is the file transport through /dev/shm.
    client = CPUWeightSyncClient(sync_server.url, admin_token=TOKEN, transport=transport)
    # Back to the original weights first (an earlier test may have changed them); the server then agrees with
    # them (the same check, as a control).
    assert client.update_weights(original_state(tiny_model))["transport"] == used
    prompt_ids, before_ids, before_lp, _ = asyncio.run(greedy(sync_server, max_tokens=12, ignore_eos=True))
    original = model_logprobs(original_state(tiny_model), tiny_model, prompt_ids, before_ids)
    assert max(abs(a - b) for a, b in zip(before_lp, original, strict=True)) < LOGPROB_TOLERANCE

    answer = client.update_weights(perturbed_state)
    assert answer["status"] == "ok" and answer["num_tensors"] == len(perturbed_state)
    assert answer["transport"] == used

    prompt_after, after_ids, after_lp, _ = asyncio.run(greedy(sync_server, max_tokens=12, ignore_eos=True))
    assert prompt_after == prompt_ids
    expected = model_logprobs(perturbed_state, tiny_model, prompt_ids, after_ids)
    max_diff = max(abs(a - b) for a, b in zip(after_lp, expected, strict=True))
    print(f"max |server - transformers| logprob after the update: {max_diff:.2e}")
    assert max_diff < LOGPROB_TOLERANCE
    # ... and the served model is no longer the original one.
    old_on_new_tokens = model_logprobs(original_state(tiny_model), tiny_model, prompt_ids, after_ids)
    assert max(abs(a - b) for a, b in zip(after_lp, old_on_new_tokens, strict=True)) > 0.05


def test_file_transport_loads_from_an_allowed_dir_and_leaves_nothing_behind(
    sync_server, tiny_model, allowed_dir
):
    state = original_state(tiny_model)
    with CPUWeightSyncClient(
        sync_server.url, admin_token=TOKEN, transport="file", shared_dir=allowed_dir
    ) as client:
        for _ in range(2):  # the second update rewrites the same file
            answer = client.update_weights(state)
            assert answer["transport"] == "file" and answer["num_tensors"] == len(state)
            assert [p.name.startswith("rlvr-weights-") for p in allowed_dir.iterdir()] == [True]
    assert list(allowed_dir.iterdir()) == [], "closing the client must delete its weights file and directory"
    client = CPUWeightSyncClient(
        sync_server.url, admin_token=TOKEN, transport="file", shared_dir=allowed_dir, keep_file=False
    )
    assert client.update_weights(state)["transport"] == "file"
    assert list(allowed_dir.iterdir()) == [], "keep_file=False deletes the file after each update"


def valid_weights_file(directory: Path) -> Path:
    directory.mkdir(mode=0o700)
    save_file({"w": torch.zeros(2)}, directory / "w.safetensors")
    return directory / "w.safetensors"


def test_paths_outside_the_allowed_dirs_are_refused(sync_server, tiny_model, allowed_dir, tmp_path):
    outside = valid_weights_file(tmp_path / "rlvr-weights-outside")  # right name, but tmp_path is no root
    inside = allowed_dir / "rlvr-weights-links"
    inside.mkdir(mode=0o700)
    (inside / "link.safetensors").symlink_to(outside)
    try:
        for path in (
            outside,
            inside / "link.safetensors",  # a symlink out of an allowed directory
            inside / ".." / ".." / outside.relative_to(allowed_dir.parent),  # ../ out of it
            Path("/etc/passwd"),
        ):
            response = httpx.post(
                sync_server.url + "/rlvr/update_weights_from_path",
                json={"path": str(path)},
                headers={ADMIN_HEADER: TOKEN},
            )
            assert response.status_code == 400, path
            assert response.json()["reason"] == "not_allowed"
            assert "outside the directories this server loads weights from" in response.json()["error"]
    finally:
        (inside / "link.safetensors").unlink()
        inside.rmdir()

    with pytest.raises(WeightSyncError, match="400.*--allow-weights-dir"):
        CPUWeightSyncClient(
            sync_server.url, admin_token=TOKEN, transport="file", shared_dir=tmp_path
        ).update_weights({"w": torch.zeros(1)})
    # "auto" falls back to sending the bytes when the server will not load its file.
    fallback = CPUWeightSyncClient(sync_server.url, admin_token=TOKEN, shared_dir=tmp_path)
    assert fallback.update_weights(original_state(tiny_model))["transport"] == "http"
    assert fallback.transport == "http"
    assert sorted(os.listdir(tmp_path)) == ["rlvr-weights-outside"], "the refused file was not deleted"


def test_a_request_in_flight_during_an_update_sees_one_set_of_weights(
    sync_server, tiny_model, perturbed_state
):
    """An update drains running requests first: a request overlapping it is all-old or all-new, never mixed."""
    client = CPUWeightSyncClient(sync_server.url, admin_token=TOKEN)
    states = {"a": original_state(tiny_model), "b": perturbed_state}
    long = 256

    async def overlap():
        version_a = client.update_weights(states["a"])["weight_version"]
        ref_a = await greedy(sync_server, max_tokens=long, ignore_eos=True)
        in_flight = asyncio.create_task(greedy(sync_server, max_tokens=long, ignore_eos=True))
        await asyncio.sleep(0.3)  # the request is being generated when the update arrives
        version_b = (await asyncio.to_thread(client.update_weights, states["b"]))["weight_version"]
        overlapped = await in_flight
        ref_b = await greedy(sync_server, max_tokens=long, ignore_eos=True)
        return version_a, version_b, ref_a, overlapped, ref_b

    version_a, version_b, ref_a, overlapped, ref_b = asyncio.run(overlap())
    # Version tags: each answer says which weights sampled it; an update during the request widens the tag to a
    # range (the trainer then counts the older one), and an exact tag is never wrong.
    assert version_b == version_a + 1
    assert ref_a[3] == (version_a, version_a) and ref_b[3] == (version_b, version_b)
    assert httpx.get(f"{sync_server.url}/rlvr/weight_version").json() == {"weight_version": version_b}
    first, last = overlapped[3]
    assert first == version_a and last in (version_a, version_b)
    assert ref_a[1] != ref_b[1], (
        "the two weight sets must generate differently for this test to mean anything"
    )

    def same(x, y) -> bool:
        return x[1] == y[1] and max(abs(a - b) for a, b in zip(x[2], y[2], strict=True)) < 1e-4

    assert same(overlapped, ref_a) or same(overlapped, ref_b)


def test_admin_token_never_appears_in_the_log(sync_server):
    log = sync_server.log_file.read_text(errors="replace")
    assert "weights updated" in log  # the log is the server's, and it did log the updates
    assert TOKEN not in log
