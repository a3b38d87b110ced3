"""Whichever process of a server's tree is SIGKILLed (the API server, vLLM's engine core, its worker), the rest of
the tree dies with it, with nobody cleaning up (the launcher's `with` block is still open): no orphan keeps a core
busy (rlvr.serve.engine.watch_parent). The death is named with the engine's last error when it logged one. Both CPU
layouts (`--cpu-engine`): vLLM's, with the worker process (the product's default), and the inline engine (the model
in the engine core; the rest of the suite runs it), which first answers as the worker layout does, token for token.

Three servers for the four links of the trees: the API server's death reaching the engine core is the same watch in
both layouts (the engine core watches its parent), so it is checked on the inline server; the worker-layout servers
lose their engine core (the API server and the worker must follow) and their worker (the engine core and the API
server must follow). The inline engine core's own death is the worker layout's, seen from the API server.

The worker is killed while a weight update waits on it: the update must be answered (503), not left waiting on an
engine that will never answer (rlvr.serve.gate.unless_engine_dies); before, the API server then never exited."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from rlvr.serve.launch import engine_error, group_processes, launch
from rlvr.serve.protocol import CPU_UPDATE_PATH

pytestmark = pytest.mark.slow

# How long the rest of the tree gets to die: the parent watches poll every 0.5 s; vLLM's own shutdown of an engine
# whose worker died takes a few seconds more on a loaded machine.
DEATH_WAIT_S = 60


def title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def alive(pids: list[int]) -> list[int]:
    """The live (not zombie) processes among `pids`."""
    live = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            live.append(pid)
    return live


def wait_until_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + DEATH_WAIT_S
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive(pids)


# A worker-layout server's processes besides its API server: one server each (the inline server loses its API server)
VICTIMS = ("VLLM::EngineCore", "VLLM::Worker")


def sample(server) -> list[dict]:
    """A greedy and a seeded request's tokens and logprobs."""
    answers = []
    for params in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 7}):
        answer = httpx.post(f"{server.url}/v1/completions", timeout=120, json={
            "model": "tiny-random", "prompt": "The capital of France is", "max_tokens": 12, "logprobs": 1,
            "ignore_eos": True, **params}).raise_for_status().json()["choices"][0]["logprobs"]
        answers.append({"tokens": answer["tokens"], "logprobs": answer["token_logprobs"]})
    return answers


def kill_worker_mid_update(server, worker: int, weights: Path, pool: ThreadPoolExecutor) -> httpx.Response:
    """SIGKILL the worker while a weight update waits on it: the worker is stopped first (SIGSTOP), so the update's
    reload is certainly pending in it when it dies. Returns the update's answer."""
    os.kill(worker, signal.SIGSTOP)
    update = pool.submit(httpx.post, f"{server.url}{CPU_UPDATE_PATH}", content=weights.read_bytes(),
                         headers={"content-type": "application/octet-stream"}, timeout=DEATH_WAIT_S)
    time.sleep(3)  # the upload (a few MB) is read and the pause done; the reload waits on the stopped worker
    assert not update.done(), "the update was answered by a stopped worker"
    os.kill(worker, signal.SIGKILL)
    return update.result(timeout=DEATH_WAIT_S + 10)


@pytest.mark.timeout(3600)  # three server starts at once on a machine that others may load heavily
def test_killing_any_process_of_a_server_leaves_none_behind(tiny_model, tmp_path, monkeypatch):
    """One server per victim, started at once (one start's wall time instead of three)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the worker layout's thread count (one core each): equal numerics
    layouts = ["worker"] * len(VICTIMS) + ["inline"]
    with contextlib.ExitStack() as stack:
        starts = [launch(model="tiny-random", extra_args=["--kv-cache-gb", "0.5", "--cpu-engine", layout],
                         log_file=tmp_path / f"{i}.log", timeout=1800) for i, layout in enumerate(layouts)]
        with ThreadPoolExecutor(len(starts)) as pool:
            servers = list(pool.map(stack.enter_context, starts))
        *servers, inline = servers
        assert sample(inline) == sample(servers[0])  # the same tokens and logprobs, greedy and seeded
        trees = {}
        pool = stack.enter_context(ThreadPoolExecutor(1))
        for victim, server in zip(VICTIMS, servers, strict=True):
            tree = group_processes(server.pid)
            titles = {pid: title(pid) for pid in tree}
            by_title = {name: [pid for pid, t in titles.items() if t.startswith(name)] for name in VICTIMS}
            assert all(len(pids) == 1 for pids in by_title.values()), titles
            if victim == "VLLM::Worker":
                answer = kill_worker_mid_update(server, by_title[victim][0], tiny_model / "model.safetensors", pool)
                assert answer.status_code == 503 and "engine died during the weight update" in answer.text, (
                    answer.status_code, answer.text)
            else:
                os.kill(by_title[victim][0], signal.SIGKILL)
            trees[victim] = (tree, titles)
        tree = group_processes(inline.pid)
        titles = {pid: title(pid) for pid in tree}
        assert not [t for t in titles.values() if t.startswith("VLLM::Worker")], titles  # the model runs inline
        assert [t for t in titles.values() if t.startswith("VLLM::EngineCore")], titles
        os.kill(inline.pid, signal.SIGKILL)
        trees["inline server's API server"] = (tree, titles)
        for victim, server in zip(trees, [*servers, inline], strict=True):
            tree, titles = trees[victim]
            left = wait_until_gone(tree)  # while the launcher's `with` block is still open: nobody cleans up
            assert not left, f"after SIGKILL of the {victim}, still alive: {[titles[p] for p in left]}"
            death = server.death(wait_s=10)
            assert death is not None and death.startswith("died (exit code"), death
            if victim == "VLLM::Worker":
                assert engine_error(server.log_file) is not None
                assert "the engine's last error" in death, death
