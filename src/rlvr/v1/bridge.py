"""rlvr's side of the bridge: the worker process in the bridge's interpreter and its protocol (rlvr.v1.worker).

One worker per environment, started on first use and kept for the batches that follow (importing verifiers 0.4
and loading the taskset costs seconds). Every wait on it is bounded: a batch that outlives its deadline (the
episode timeout times the waves of `max_concurrent` episodes, plus a margin) kills the worker's whole process
group, scores the episodes that had not come back as failures, and the next batch starts a fresh worker.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr.serve.protocol import ServerError

WORKER = Path(__file__).with_name("worker.py")
RENDERER = f"{Path(__file__).with_name('renderer.py')}:HermesTextRenderer"
PYTHON_ENV = "RLVR_V1_PYTHON"
OPEN_TIMEOUT_S = 300.0  # importing verifiers and loading a taskset, on a busy machine
MARGIN_S = 30.0  # added to a batch's deadline for the worker's own bookkeeping (rlvr setting deadline_margin)


SERVE_FLAGS = ("--enable-scale-out",)


class V1Error(ServerError):
    """The bridge cannot do what was asked; the message is one line with the fix. A ServerError: to the trainer
    the bridge is where rollouts come from, and `rlvr train` reports these in one line."""


def check_generate(url: str, model: str, timeout: float = 60.0) -> None:
    """verifiers' train client samples through vLLM's token-in, token-out route /inference/v1/generate, which vLLM
    serves only with --enable-scale-out: one 1-token request shows whether this server does."""
    import httpx

    root = url.rstrip("/").removesuffix("/v1")
    fix = f"start it as `rlvr serve --model {model} {' '.join(SERVE_FLAGS)}` (vLLM flags, passed through)"
    try:
        response = httpx.post(f"{root}/inference/v1/generate", timeout=timeout, json={
            "model": model, "token_ids": [0], "sampling_params": {"max_tokens": 1, "logprobs": 1}})
    except httpx.HTTPError as e:
        raise V1Error(f"the rollout server at {root} is unreachable ({type(e).__name__}: {e})") from e
    if response.status_code in (403, 404, 405):
        raise V1Error(f"the rollout server at {root} does not serve /inference/v1/generate "
                      f"(HTTP {response.status_code}), which verifiers v1 samples through: {fix}")
    response.raise_for_status()


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def v1_python() -> Path:
    """The bridge's interpreter: $RLVR_V1_PYTHON, else .venv-v1 beside rlvr's checkout (scripts/setup_v1.sh)."""
    path = Path(os.environ.get(PYTHON_ENV) or repo_root() / ".venv-v1" / "bin" / "python")
    if not path.exists():
        raise V1Error(f"the bridge's interpreter {path} does not exist: run `make setup` (scripts/setup_v1.sh "
                      f"builds .venv-v1 with verifiers 0.4), or point ${PYTHON_ENV} at a Python with verifiers 0.4")
    return path


class Worker:
    """One running worker: requests in on stdin, replies read by a thread into a queue (so every wait can time
    out), stderr to a log file whose tail goes into errors."""

    def __init__(self, env_config: Mapping[str, Any]):
        self.log = tempfile.NamedTemporaryFile(prefix="rlvr-v1-worker-", suffix=".log", delete=False)  # noqa: SIM115
        child_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                     "PYTHONUNBUFFERED": "1", "VIRTUAL_ENV": ""}
        # its own session: a kill reaches the harness programs it started too
        self.process = subprocess.Popen([str(v1_python()), str(WORKER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, text=True, env=child_env,
                                        start_new_session=True)
        atexit.register(self.close)  # a run that never closes its environment leaves no worker and no log behind
        self.replies: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="rlvr-v1-reader").start()
        self.send({"op": "open", "env": dict(env_config)})
        opened = self.reply(time.monotonic() + OPEN_TIMEOUT_S, "opening the environment")
        if opened.get("op") != "opened":
            self.close()
            raise self.error(opened)
        self.tasks: list[dict] = opened["tasks"]
        self.env_id: str = opened["env_id"]
        self.verifiers: str = opened["verifiers"]

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                self.replies.put(json.loads(line))
            except json.JSONDecodeError:
                self.replies.put({"op": "error", "kind": "protocol", "message": f"not JSON: {line[:200]!r}"})
        self.replies.put(None)  # end of output: the worker exited

    def send(self, message: dict) -> None:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise V1Error(f"the v1 worker exited (code {self.process.poll()}): {self.log_tail()}") from None

    def reply(self, deadline: float, doing: str) -> dict:
        try:
            message = self.replies.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            self.kill()
            raise TimeoutError(f"the v1 worker gave no answer while {doing} before its deadline and was killed") \
                from None
        if message is None:
            code = self.process.wait()
            raise V1Error(f"the v1 worker exited (code {code}) while {doing}: {self.log_tail()}")
        return message

    def error(self, message: dict) -> V1Error:
        if message.get("op") == "error":
            return V1Error(f"v1 environment: {message.get('message')}")
        return V1Error(f"the v1 worker answered {str(message)[:200]} where rlvr expected another reply")

    def log_tail(self, chars: int = 800) -> str:
        text = Path(self.log.name).read_text(errors="replace")
        return " ".join(text[-chars:].split()) or "(no output)"

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()

    def close(self) -> None:
        if self.alive():
            try:
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
        Path(self.log.name).unlink(missing_ok=True)

    def run(self, batch: int, episodes: list[dict], *, endpoint: dict, sampling: dict, timeout: float,
            max_concurrent: int, margin: float = MARGIN_S) -> dict[int, dict]:
        """Slot -> {"traces", "error"} for every episode; those that did not come back before the deadline
        (`timeout` x the waves of `max_concurrent` episodes + `margin` s; the worker is then killed) get only an
        error."""
        waves = -(-len(episodes) // max(max_concurrent, 1))
        deadline = time.monotonic() + timeout * waves + margin
        self.send({"op": "run", "batch": batch, "episodes": episodes, "endpoint": endpoint, "sampling": sampling,
                   "timeout": timeout, "max_concurrent": max_concurrent})
        results: dict[int, dict] = {}
        try:
            while True:
                message = self.reply(deadline, f"running batch {batch}")
                if message.get("op") == "done":
                    return results
                if message.get("op") != "episode":
                    raise self.error(message)
                results[int(message["slot"])] = message
        except TimeoutError:
            lost = (f"killed with the v1 worker at the batch's {timeout * waves + margin:g} s deadline "
                    "(a harness that blocks verifiers' event loop cannot be cancelled): make its blocking calls "
                    "awaitable (asyncio.to_thread, an async client) or give it more time with --env-args "
                    "'{\"rlvr\": {\"episode_timeout\": S}}'")
            for e in episodes:
                results.setdefault(int(e["slot"]), {"traces": [], "error": lost})
            return results
