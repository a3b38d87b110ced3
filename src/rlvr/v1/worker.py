"""The bridge's worker: runs verifiers v1 episodes with verifiers 0.4's own code, in the bridge's interpreter.

Run as a script by `.venv-v1/bin/python` (never imported by rlvr: rlvr's interpreter has verifiers 0.1.9, and the
two cannot share one environment). Imports only the standard library and verifiers 0.4 (with the packages it
brings). The protocol, one JSON object per line (docs/v1.md, "Protocol"; rlvr's side is rlvr.v1.bridge):

  rlvr -> worker  {"op": "open", "env": <v1 [env] config>}
  worker -> rlvr  {"op": "opened", "verifiers": <version>, "env_id": <id>, "tasks": [{"idx", "id", "prompt",
                   "data"}]}
  rlvr -> worker  {"op": "run", "batch": <n>, "episodes": [{"slot", "task", "seed"}], "endpoint": {"base_url",
                   "model", "renderer_model", "renderer"}, "sampling": {...}, "timeout": <seconds per episode>,
                   "max_concurrent": <episodes at once>}
  worker -> rlvr  {"op": "episode", "slot": <k>, "traces": [<Trace.to_record()>], "error": <str | null>}
                  ... one per episode, as each finishes ..., then {"op": "done", "batch": <n>}
  worker -> rlvr  {"op": "error", "kind": <what>, "message": <one line with the fix>}: the request cannot run
                  (the worker exits after an error in "open").

An episode that outlives its timeout is cancelled and reported with its error; a harness that blocks the event
loop cannot be cancelled, so rlvr kills the worker at the batch's deadline (rlvr.v1.bridge).
stdout carries the protocol only: everything verifiers prints or logs goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import traceback
from pathlib import Path

PROTOCOL = sys.stdout
sys.stdout = sys.stderr  # a print anywhere in verifiers or an environment must not corrupt the protocol

LOCAL_RUNTIMES = ("subprocess",)
NEEDS_NETWORK = ("the harness installs its program with `uv sync --script`, which needs the package index unless the "
                 "program is locked in the bridge's program cache: run `make setup` (scripts/setup_v1.sh locks and "
                 "caches verifiers' chat program, the null and bash harnesses'); another harness's program needs "
                 "an in-process harness instead (docs/v1.md, 'Hub-shaped environments')")
NEEDS_CONTAINER = ("the harness asks for a container (verifiers' Harness.NEEDS_CONTAINER, True unless the class sets "
                   "it False) and rlvr's bridge runs every agent in the local subprocess runtime: set NEEDS_CONTAINER "
                   "= False on a harness of your own that runs in-process (docs/v1.md, 'Writing a v1 environment for "
                   "rlvr'); a built-in harness that needs one cannot run here: use the null or bash harness")
# verifiers' null and bash harnesses (bash: the default of a taskset that ships no harness, as hub environments do)
# run one PEP 723 chat program, which the runtime installs with `uv sync --script <scripts_dir>/<sha256>.py` in
# every new process (verifiers/v1/runtimes/base.py, prepare_uv_script). uv resolves a script against the package
# index unless a lockfile sits beside it (`<script>.lock`, written by `uv lock --script`); with the lock and uv's
# cache filled at setup (prepare_programs), the sync installs from the cache and needs no network. Both live in
# the bridge interpreter's prefix, so setup and every run agree, and a rebuilt .venv-v1 rebuilds them.
PROGRAMS = Path(sys.prefix) / "rlvr-programs"


class WorkerError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def send(message: dict) -> None:
    PROTOCOL.write(json.dumps(message) + "\n")
    PROTOCOL.flush()


def one_line(text: str, limit: int = 600) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def raised_at(trace_text: str | None) -> str:
    """' (raised in fn, dir/file.py:N)': where the first exception of a recorded traceback was raised (its root
    cause: traceback.format_exception prints the chain from the cause on), so that a line like 'TaskError: task T
    scoring: ZeroDivisionError' names the reward or harness code to fix; '' without a traceback."""
    first = re.split(r"\n(?:The above exception|During handling of the above exception)", trace_text or "")[0]
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', first)
    if not frames:
        return ""
    path, line, function = frames[-1]
    return f" (raised in {function}, {'/'.join(Path(path).parts[-2:])}:{line})"


def env_config(raw: dict):
    """The v1 env config with rlvr's defaults: every agent in the local subprocess runtime unless it names one;
    a runtime that is not local cannot run here."""
    import verifiers.v1 as vf
    from verifiers.v1.configs.agent import agent_config_fields

    raw = json.loads(json.dumps(raw))  # a copy
    taskset = raw.get("taskset") or {}
    if not taskset.get("id"):
        raise WorkerError("config", "the v1 environment config names no taskset: give --env v1:<taskset-id>")
    try:
        config = vf.resolve_env_config(raw)
    except ModuleNotFoundError as e:
        raise WorkerError("not-installed", f"{one_line(e)} Install it into the bridge's interpreter: "
                          f".venv-v1/bin/python -m pip install <its package> (docs/v1.md)") from None
    for name, spec in agent_config_fields(config).items():
        given = ((raw.get(name) or {}).get("runtime") or {}).get("type")
        if given is None:
            spec.runtime = vf.SubprocessConfig()
        elif given not in LOCAL_RUNTIMES:
            raise WorkerError("runtime", f"agent {name!r} asks for the {given!r} runtime, which rlvr's bridge cannot "
                              "run here (hosted sandboxes and containers are out of reach); set "
                              f'{{"{name}": {{"runtime": {{"type": "subprocess"}}}}}} in --env-args to run it locally')
    return config


def offline_programs() -> None:
    """uv's cache and the runtime's script folder in PROGRAMS, and this interpreter's `uv` first on PATH (the
    runtime looks for one that supports --script and otherwise installs one from the network)."""
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    os.environ["UV_CACHE_DIR"] = str(PROGRAMS / "uv")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    SubprocessRuntime.scripts_dir = str(PROGRAMS / "scripts")  # a class setting, shared by the worker's runtimes


def prepare_programs() -> None:
    """Setup, with the network (scripts/setup_v1.sh): write verifiers' chat program where the runtime will (its
    content-addressed name, as prepare_uv_script names it), lock it and install it once, filling uv's cache."""
    import hashlib
    import subprocess

    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    offline_programs()
    data = CHAT_PROGRAM_SOURCE.encode()
    path = Path(SubprocessRuntime.scripts_dir) / f"{hashlib.sha256(data).hexdigest()}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    for command in ("lock", "sync"):
        subprocess.run(["uv", command, "--script", str(path), "-q", "--no-config"], check=True)
    print(f"rlvr v1: verifiers' chat program locked and cached in {PROGRAMS}")


def call_seed(seed: int, prompt_tokens: int) -> int:
    """The sampling seed of one model call of an episode: the episode's seed mixed with the call's prompt length,
    which grows from call to call within an episode. verifiers' SamplingConfig gives every call of an episode the
    one seed, and vLLM's seeded sampling then draws the same random numbers at every turn: replies repeat across
    turns (in v1-credit-suite, SmolLM2-135M's two replies were equal in 107 of 125 episodes), which hides paths
    whose turns must differ (misleading_reward's B then A). Deterministic, so runs still replay."""
    import hashlib

    digest = hashlib.sha256(f"v1-call/{seed}/{prompt_tokens}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def seed_each_call() -> None:
    """Every /inference/v1/generate call of verifiers' train client (renderers.client.generate, looked up per call
    by verifiers/v1/clients/train.py) gets `call_seed` of its episode's seed."""
    from renderers import client

    generate = client.generate

    async def seeded_generate(*args, **kwargs):
        params, prompt_ids = kwargs.get("sampling_params"), kwargs.get("prompt_ids")
        if params and params.get("seed") is not None and prompt_ids is not None:
            kwargs["sampling_params"] = {**params, "seed": call_seed(params["seed"], len(prompt_ids))}
        return await generate(*args, **kwargs)

    client.generate = seeded_generate


def read_vllm_logprobs() -> None:
    """renderers 0.1.12 (verifiers 0.4's token client) reads each sampled token's logprob entry of vLLM's
    /inference/v1/generate as {"token": "token_id:<id>", ...} (renderers/client.py, _parse_completion_logprobs);
    vLLM 0.32 answers the route's default output_mode="tokens" with {"token_id": <id>, ...}. Its answers are given
    the field renderers reads, before renderers parses them; nothing else changes."""
    from renderers import client

    parse = client.parse_generate_response

    def parse_generate_response(raw: bytes) -> dict:
        payload = parse(raw)
        for choice in payload.get("choices") or []:
            for entry in (choice.get("logprobs") or {}).get("content") or []:
                if "token" not in entry and "token_id" in entry:
                    entry["token"] = f"token_id:{entry['token_id']}"
        return payload

    client.parse_generate_response = parse_generate_response


def task_record(task) -> dict:
    data = task.data
    prompt = data.prompt
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    else:
        prompt = [m.model_dump(mode="json", exclude_none=True) for m in prompt or []]
    if data.system_prompt:
        prompt = [{"role": "system", "content": data.system_prompt}, *prompt]
    return {"idx": data.idx, "id": data.id, "prompt": prompt, "data": data.model_dump(mode="json")}


def model_context(endpoint: dict, sampling: dict, seed: int | None):
    """verifiers' train client on rlvr's server: it renders each prompt to token ids itself and calls vLLM's
    /inference/v1/generate, so the trace's nodes carry the sampled token ids and logprobs."""
    import verifiers.v1 as vf
    from renderers.configs import CustomRendererConfig

    client = vf.TrainClientConfig(
        base_url=endpoint["base_url"], api_key_var="RLVR_V1_API_KEY",
        renderer=CustomRendererConfig(import_path=endpoint["renderer"]),
        renderer_model_name=endpoint["renderer_model"],
    )
    values = dict(sampling)
    if seed is not None:
        values["seed"] = seed
    return vf.ModelContext(model=endpoint["model"], client=client, sampling=vf.SamplingConfig(**values))


async def run_episode(env, task, ctx, timeout: float) -> tuple[list[dict], str | None]:
    from verifiers.v1.env import RunSlot

    try:
        episode = await asyncio.wait_for(env.run_slot(RunSlot(task), ctx), timeout)
    except TimeoutError:
        return [], (f"the episode outlived its {timeout:g} s limit and was cancelled (a hung harness or tool?); "
                    "raise it with rlvr's v1 episode timeout (--env-args '{\"rlvr\": {\"episode_timeout\": S}}')")
    except Exception as e:  # noqa: BLE001 - an episode's failure is data for rlvr, which scores it as a failure
        return [], one_line(f"{type(e).__name__}: {e}")
    error = None
    if not episode.ok:
        errors = [*episode.errors, *(err for t in episode.traces for err in t.errors)]
        error = one_line("; ".join(f"{err.type}: {err.message}{raised_at(err.traceback)}" for err in errors)
                         or "the episode did not finish")
        if "failed to prepare uv script" in error:
            error = one_line(f"{NEEDS_NETWORK} ({error[:300]})")
        elif "(NEEDS_CONTAINER)" in error:  # verifiers' own line names docker or prime, which cannot run here
            error = one_line(f"{NEEDS_CONTAINER} ({error[:300]})")
    return [t.to_record(float_decimals=None) for t in episode.traces], error


async def serve() -> None:
    import verifiers
    import verifiers.v1 as vf

    read_vllm_logprobs()
    seed_each_call()
    offline_programs()
    loop = asyncio.get_running_loop()

    async def read() -> dict | None:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        return json.loads(line) if line.strip() else None

    request = await read()
    if request is None or request.get("op") != "open":
        raise WorkerError("protocol", f"the first request must be op=open, got {request!r}")
    env = vf.load_environment(env_config(request["env"]))
    tasks = list(env.taskset)
    send({"op": "opened", "verifiers": verifiers.__version__, "env_id": env.config.env_id,
          "tasks": [task_record(t) for t in tasks]})
    async with env.serving():
        while (request := await read()) is not None:
            if request.get("op") != "run":
                raise WorkerError("protocol", f"unknown request op {request.get('op')!r}")

            gate = asyncio.Semaphore(int(request.get("max_concurrent") or len(request["episodes"]) or 1))

            async def one(episode: dict, request: dict = request, gate: asyncio.Semaphore = gate) -> None:
                ctx = model_context(request["endpoint"], request["sampling"], episode.get("seed"))
                async with gate:  # the episode's time limit starts when it does
                    traces, error = await run_episode(env, tasks[episode["task"]], ctx, float(request["timeout"]))
                send({"op": "episode", "slot": episode["slot"], "traces": traces, "error": error})

            await asyncio.gather(*(one(e) for e in request["episodes"]))
            send({"op": "done", "batch": request.get("batch")})


def main() -> int:
    try:
        asyncio.run(serve())
    except WorkerError as e:
        send({"op": "error", "kind": e.kind, "message": one_line(str(e))})
        return 2
    except Exception as e:  # noqa: BLE001 - reported on the protocol in one line, the traceback on stderr
        traceback.print_exc()
        send({"op": "error", "kind": type(e).__name__, "message": one_line(f"{type(e).__name__}: {e}")})
        return 1
    with contextlib.suppress(Exception):
        PROTOCOL.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--prepare-programs"]:
        sys.exit(prepare_programs())
    sys.exit(main())
