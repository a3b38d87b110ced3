"""`rlvr serve` argument handling, the admin check, the file transport's path check, imports: no server needed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.serve.admin import AdminTokenMiddleware
from rlvr.serve.client import CPUWeightSyncClient
from rlvr.serve.cpu_routes import WeightsPathError, weights_file
from rlvr.serve.launch import dtype_args
from rlvr.serve.options import CPU_ENGINE_ENV, KV_CACHE_ENV, ServeError, parse_args, vllm_argv
from rlvr.serve.protocol import ADMIN_HEADER, ADMIN_PATHS, is_loopback
from rlvr.serve.staging import StagingFile, state_tensors


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


def test_bad_kv_cache_size_is_refused(monkeypatch):
    with pytest.raises(ServeError, match="--kv-cache-gb"):
        parse_args(["--model", "tiny-random", "--kv-cache-gb", "0"])
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv(KV_CACHE_ENV, bad)
        with pytest.raises(ServeError, match=f"RLVR_KV_CACHE_GB={bad!r}: must be a positive number of GiB"):
            parse_args(["--model", "tiny-random"])


def test_the_cpu_engine_layout_comes_from_the_flag_else_the_environment_else_vllms(monkeypatch):
    monkeypatch.delenv(CPU_ENGINE_ENV, raising=False)
    assert parse_args(["--model", "tiny-random"])[0].cpu_engine == "worker"
    monkeypatch.setenv(CPU_ENGINE_ENV, "inline")
    assert parse_args(["--model", "tiny-random"])[0].cpu_engine == "inline"
    assert parse_args(["--model", "tiny-random", "--cpu-engine", "worker"])[0].cpu_engine == "worker"
    monkeypatch.setenv(CPU_ENGINE_ENV, "threads")
    with pytest.raises(ServeError, match="RLVR_CPU_ENGINE='threads': must be one of worker, inline"):
        parse_args(["--model", "tiny-random"])
    with pytest.raises(SystemExit):  # argparse names the choices
        parse_args(["--model", "tiny-random", "--cpu-engine", "threads"])


def test_the_cpu_kv_cache_default_comes_from_the_environment_unless_given(monkeypatch):
    monkeypatch.setenv(KV_CACHE_ENV, "0.5")
    options, _ = parse_args(["--model", "tiny-random"])
    argv = vllm_argv(options, "/models/tiny", [], on_cpu=True, tools=False)
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(2**29)
    options, _ = parse_args(["--model", "tiny-random", "--kv-cache-gb", "3"])
    argv = vllm_argv(options, "/models/tiny", [], on_cpu=True, tools=False)
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(3 * 2**30)
    assert "--kv-cache-memory-bytes" not in vllm_argv(options.__class__(**{**options.__dict__, "kv_cache_gb": None}),
                                                      "org/model", [], on_cpu=False, tools=False)


def test_vllm_argv_cpu_defaults_and_passthrough_wins(monkeypatch):
    monkeypatch.delenv(KV_CACHE_ENV, raising=False)  # the test suite sets it (conftest.py)
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
    assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"  # the sampled distribution's
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
    assert {
        "/rlvr/update_weights_from_path",
        "/update_named_param",
        "/init_communicator",
        "/reset_prefix_cache",
    } <= ADMIN_PATHS


def test_client_accepts_the_base_url():
    assert CPUWeightSyncClient("http://h:1/v1/").url == "http://h:1"


def test_client_transport_auto_is_file_on_loopback_only():
    assert CPUWeightSyncClient("http://127.0.0.1:8000/v1").transport == "file"
    assert CPUWeightSyncClient("http://localhost:8000").transport == "file"
    assert CPUWeightSyncClient("http://[::1]:8000").transport == "file"
    assert CPUWeightSyncClient("http://10.1.2.3:8000").transport == "http"
    assert CPUWeightSyncClient("http://127.0.0.1:8000", transport="http").transport == "http"
    with pytest.raises(ValueError, match="transport must be one of"):
        CPUWeightSyncClient("http://127.0.0.1:8000", transport="shm")


def test_weights_file_refuses_paths_outside_the_allowed_roots(tmp_path):
    root, other = tmp_path / "root", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    good_file, stray_file = StagingFile(root), StagingFile(other)
    good = good_file.write(state_tensors({"w": torch.zeros(1)}))
    stray = stray_file.write(state_tensors({"w": torch.zeros(1)}))
    loose = root / "loose.safetensors"  # in the root, but not in an rlvr-weights-* directory
    loose.write_bytes(good.read_bytes())
    link = good.parent / "link.safetensors"
    link.symlink_to(stray)
    nested = good.parent / "rlvr-weights-nested"  # one level too deep
    nested.mkdir(mode=0o700)
    (nested / "w.safetensors").write_bytes(good.read_bytes())
    for path, reason, message in [
        (stray, "not_allowed", "outside the directories"),
        (link, "not_allowed", "outside the directories"),
        (good.parent / ".." / ".." / "other" / stray.parent.name / stray.name, "not_allowed", "outside"),
        (loose, "not_allowed", "outside the directories"),
        (nested / "w.safetensors", "not_allowed", "outside the directories"),
        (Path("/etc/passwd"), "not_allowed", "outside the directories"),
        (root / "rlvr-weights-missing" / "w.safetensors", "not_found", "same machine"),
        (nested, "bad_request", "not a regular file"),  # a directory where the file should be
        ("relative/w.safetensors", "bad_request", "absolute"),
        (None, "bad_request", "absolute"),
    ]:
        with pytest.raises(WeightsPathError, match=message) as caught:
            weights_file(str(path) if isinstance(path, Path) else path, [root])
        assert caught.value.reason == reason, path
    # A directory that others may write to could have its file swapped after the check.
    good.parent.chmod(0o777)
    with pytest.raises(WeightsPathError, match="writable by it alone"):
        weights_file(str(good), [root])


def test_allow_weights_dir_must_exist(tmp_path):
    options, passthrough = parse_args(["--model", "tiny-random", "--allow-weights-dir", str(tmp_path)])
    assert options.weights_dirs == (tmp_path,) and passthrough == []
    with pytest.raises(ServeError, match="--allow-weights-dir"):
        parse_args(["--model", "tiny-random", "--allow-weights-dir", str(tmp_path / "missing")])


def test_the_client_side_imports_neither_fastapi_nor_vllm():
    """A trainer imports rlvr.serve (client, launch, protocol) without the server's dependencies."""
    code = (
        "import sys, rlvr.serve, rlvr.serve.protocol, rlvr.serve.client, rlvr.serve.launch; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fastapi', 'starlette', 'vllm', 'uvicorn'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_launch_dtype_becomes_the_vllm_flag():
    assert dtype_args(None, []) == []
    assert dtype_args(torch.float32, []) == ["--dtype", "float32"]
    assert dtype_args(torch.bfloat16, ["--seed", "1"]) == ["--dtype", "bfloat16"]
    assert dtype_args("auto", []) == ["--dtype", "auto"]
    with pytest.raises(ValueError, match="one of auto, half"):
        dtype_args(torch.int8, [])
    with pytest.raises(ValueError, match="give the dtype once"):
        dtype_args("float32", ["--dtype=bfloat16"])
