"""An evaluation whose server fails (rlvr.evaluation.ServerRecovery): a server it started is restarted and the failed
calls sent again with their seeds; otherwise it stops with one line, and never returns results (so no summary is
written) over rollouts that failed for the server's sake."""

from __future__ import annotations

import asyncio
import http.server
import threading

import httpx
import openai
import pytest
import verifiers as vf

from rlvr import evaluation
from rlvr.serve.launch import free_port


def connection_error(url: str) -> openai.APIConnectionError:
    return openai.APIConnectionError(request=httpx.Request("POST", f"{url}/v1/chat/completions"))


def server_error(url: str) -> openai.InternalServerError:
    request = httpx.Request("POST", f"{url}/v1/chat/completions")
    return openai.InternalServerError("EngineCore encountered an issue", response=httpx.Response(500, request=request),
                                      body=None)


def failed_state(cause: BaseException) -> dict:
    try:
        raise vf.ModelError from cause  # how verifiers records a failed model call (Environment.get_model_response)
    except vf.ModelError as err:
        return {"error": err}


def test_a_users_server_that_is_gone_stops_the_evaluation_in_one_line():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    recovery = evaluation.ServerRecovery(f"{url}/v1", health_timeout=1)
    sends = []

    async def send():
        sends.append(1)
        raise connection_error(url)

    with pytest.raises(openai.APIConnectionError):
        asyncio.run(recovery.call(send))
    assert len(sends) == 1
    assert recovery.lost == (f"the rollout server {url} does not answer {url}/health within 1 s (ConnectError) "
                             "(APIConnectionError): the evaluation stopped and wrote no results; restart it, then run "
                             "the same command again")
    with pytest.raises(evaluation.ServerLost) as lost:
        recovery.check({"state": [failed_state(connection_error(url)), {"error": None}]})
    assert "\n" not in str(lost.value) and str(lost.value).endswith("(1 of 2 rollouts failed)")


@pytest.fixture
def healthy_url():
    """A real HTTP server that answers GET /health with 200."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_failure_of_a_healthy_server_is_the_requests_own_but_no_summary_is_written_over_it(healthy_url):
    recovery = evaluation.ServerRecovery(healthy_url)

    async def send():
        raise server_error(healthy_url)

    with pytest.raises(openai.InternalServerError):
        asyncio.run(recovery.call(send))
    assert recovery.lost is None  # the server is fine: the rollout records the error, the others go on
    other = failed_state(ValueError("a tool failed"))  # not the server's: an ordinary rollout error
    recovery.check({"state": [other, {"error": None}]})
    with pytest.raises(evaluation.ServerLost, match=r"^1 of 3 rollouts failed for the server's sake although the "
                       rf"server at {healthy_url} answers /health \(first: InternalServerError: "):
        recovery.check({"state": [other, failed_state(server_error(healthy_url)), {"error": None}]})


class KillOnce(vf.MultiTurnEnv):
    """Two turns; the environment's first answer to example 0 SIGKILLs the server's engine core (once): a real
    death in the middle of the evaluation, at a known point."""

    def __init__(self, kill, **kwargs):
        super().__init__(**kwargs)
        self.kill = kill

    async def env_response(self, messages, state, **kwargs):
        if state["example_id"] == 0 and self.kill is not None:
            kill, self.kill = self.kill, None
            kill()
        return [{"role": "user", "content": "Go on."}]


def kill_engine_core(server) -> None:
    import os
    import signal
    import time
    from pathlib import Path

    from rlvr.serve.launch import group_processes

    (engine,) = [pid for pid in group_processes(server.pid)
                 if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::EngineCore")]
    os.kill(engine, signal.SIGKILL)
    while server.exit_code() is None and answers_health(server):
        time.sleep(0.2)  # the API server notices its engine's death: the next call fails


def answers_health(server) -> bool:
    """False once the API server has closed its socket too (it may exit before `exit_code()` sees it)."""
    try:
        return httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(3600)  # two server starts (the first and the restart) on a machine others may load
def test_an_evaluation_restarts_the_server_it_started_and_samples_the_same_rollouts(tiny_model, tmp_path):
    from datasets import Dataset

    from rlvr.serve.launch import group_processes, keep_serving

    dataset = Dataset.from_list([{"question": f"Round {i}: say a word.", "answer": "", "example_id": i}
                                 for i in range(4)])
    rubric = vf.Rubric(funcs=[lambda completion, **_: float(len(completion))], weights=[1.0])
    with keep_serving("tiny-random", extra_args=["--kv-cache-gb", "0.5"], log_file=tmp_path / "serve.log",
                      timeout=1800) as server:
        first = server.server

        def run(kill):
            env = KillOnce(kill, dataset=dataset, rubric=rubric, max_turns=2)
            return evaluation.run_rollouts(
                env, base_url=server.base_url, model=server.model, num_examples=4, rollouts_per_example=2,
                sampling_args={"temperature": 1.0, "max_tokens": 8}, sampling_seed=7, max_concurrent=4,
                server=server)

        disturbed = run(lambda: kill_engine_core(first))
        assert server.restarts == 1 and server.server is not first
        assert not group_processes(first.pid)  # the dead server's tree is gone
        assert [s["error"] for s in disturbed["state"]] == [None] * 8
        undisturbed = run(None)
    assert [s["completion"] for s in disturbed["state"]] == [s["completion"] for s in undisturbed["state"]]
