"""`rlvr serve` argument handling, the admin check and state-dict serialization: no server needed."""

from __future__ import annotations

import asyncio

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load

from rlvr.serve.client import CPUWeightSyncClient, serialize_state_dict
from rlvr.serve.server import (
    ADMIN_HEADER,
    ADMIN_PATHS,
    AdminTokenMiddleware,
    ServeError,
    is_loopback,
    parse_args,
    vllm_argv,
)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.1.2.3", False),
        ("192.168.0.7", False),
    ],
)
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected


def test_non_loopback_bind_without_a_token_is_refused(monkeypatch):
    monkeypatch.delenv("RLVR_ADMIN_TOKEN", raising=False)
    with pytest.raises(ServeError, match="--admin-token"):
        parse_args(["--model", "tiny-random", "--host", "0.0.0.0"])
    monkeypatch.setenv("RLVR_ADMIN_TOKEN", "s3cret")
    options, _ = parse_args(["--model", "tiny-random", "--host", "0.0.0.0"])
    assert options.admin_token == "s3cret"


@pytest.mark.parametrize("flag", ["--worker-extension-cls=x.Y", "--served-model-name"])
def test_flags_that_rlvr_sets_are_refused(flag):
    with pytest.raises(ServeError, match="set by rlvr serve"):
        parse_args(["--model", "tiny-random", flag, "other"])


def test_bad_kv_cache_size_is_refused():
    with pytest.raises(ServeError, match="--kv-cache-gb"):
        parse_args(["--model", "tiny-random", "--kv-cache-gb", "0"])


def test_vllm_argv_cpu_defaults_and_passthrough_wins():
    options, passthrough = parse_args(
        ["--model", "tiny-random", "--port", "9000", "--no-enforce-eager", "--seed", "3"]
    )
    argv = vllm_argv(options, "/models/tiny", passthrough, on_cpu=True, tools=True)
    assert argv[:8] == [
        "--model",
        "/models/tiny",
        "--served-model-name",
        "tiny-random",
        "--host",
        "127.0.0.1",
        "--port",
        "9000",
    ]
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(2 * 2**30)
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    # The user's --no-enforce-eager comes after rlvr's --enforce-eager, so argparse keeps the user's.
    assert argv.index("--no-enforce-eager") > argv.index("--enforce-eager")
    assert argv[-2:] == ["--seed", "3"]


def test_vllm_argv_on_gpu_leaves_kv_cache_and_eager_to_vllm():
    options, _ = parse_args(["--model", "org/model"])
    argv = vllm_argv(options, "org/model", [], on_cpu=False, tools=False)
    assert "--enforce-eager" not in argv and "--kv-cache-memory-bytes" not in argv
    assert "--tool-call-parser" not in argv


def call_middleware(path: str, headers: dict[str, str]) -> int:
    """Status that AdminTokenMiddleware gives a request (200 = passed on to the app)."""
    sent: list[dict] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    asyncio.run(AdminTokenMiddleware(app, token="tok")(scope, None, send))
    return sent[0]["status"]


def test_middleware_guards_admin_paths_only():
    assert call_middleware("/rlvr/update_weights", {}) == 403
    assert call_middleware("/rlvr/update_weights", {ADMIN_HEADER: "tok"}) == 200
    assert call_middleware("/rlvr/update_weights", {ADMIN_HEADER: "to"}) == 403
    assert call_middleware("/v1/chat/completions", {}) == 200
    assert {"/update_named_param", "/init_communicator", "/reset_prefix_cache"} <= ADMIN_PATHS


def test_serialize_clones_tied_weights_and_round_trips():
    embed = torch.randn(10, 4)
    state = {"model.embed_tokens.weight": embed, "lm_head.weight": embed, "model.norm.weight": torch.ones(4)}
    loaded = load(serialize_state_dict(state))
    assert set(loaded) == set(state)
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor)


def test_serialize_rejects_bad_state_dicts():
    with pytest.raises(ValueError, match="empty"):
        serialize_state_dict({})
    with pytest.raises(TypeError, match="state_dict\\['w'\\]"):
        serialize_state_dict({"w": [1.0, 2.0]})


def test_client_accepts_the_base_url():
    assert CPUWeightSyncClient("http://h:1/v1/").url == "http://h:1"


@settings(max_examples=25, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=3), min_size=1, max_size=4),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    tie=st.booleans(),
)
def test_serialize_round_trips_any_state_dict(shapes, dtype, tie):
    state = {f"layer.{i}.weight": torch.randn(shape).to(dtype) for i, shape in enumerate(shapes)}
    if tie:
        state["tied.weight"] = state["layer.0.weight"]
    loaded = load(serialize_state_dict(state))
    assert all(
        torch.equal(loaded[name], tensor) and loaded[name].dtype == dtype for name, tensor in state.items()
    )
