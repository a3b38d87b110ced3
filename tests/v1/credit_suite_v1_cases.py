"""The golden cases through v1-credit-suite, run by the bridge's interpreter (.venv-v1, verifiers 0.4) for
tests/v1/test_port_credit_suite.py: `.venv-v1/bin/python credit_suite_v1_cases.py GOLDEN.json`.

Each case runs as rlvr's bridge runs an episode (src/rlvr/v1/worker.py: its env config, `env.serving()`,
`run_episode`): verifiers' loader, the port's harness, the interception server and scoring, unchanged. Only the model
is scripted: a local OpenAI-compatible chat server answers the case's replies in order, as rlvr.testing's
ScriptedClient does on the 0.1.9 side (the model name says which case; the count of assistant messages in the
request, which turn). verifiers' eval client relays to it, so the traces carry messages, not token ids.
Writes one JSON line per case to stdout: {"case": i, "traces": [<Trace.to_record()>], "error": ...}.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from aiohttp import web

WORKER = Path(__file__).resolve().parents[2] / "src" / "rlvr" / "v1" / "worker.py"
EPISODE_TIMEOUT_S = 120.0  # generous: the machine may be busy; a case takes well under a second


def load_worker():
    """rlvr's worker module, from its file (rlvr.v1's package imports rlvr's own dependencies, absent here)."""
    spec = importlib.util.spec_from_file_location("rlvr_v1_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # it points sys.stdout at stderr: its `send` writes the protocol stream
    return module


def scripted_app(cases: list[dict]) -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        replies = cases[int(body["model"].removeprefix("case-"))]["replies"]
        turn = sum(m.get("role") == "assistant" for m in body["messages"])
        if turn >= len(replies):
            return web.json_response({"error": {"message": f"the script has {len(replies)} replies; turn {turn} "
                                                           "asked for one more"}}, status=400)
        return web.json_response({
            "id": f"scripted-{turn}", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": replies[turn]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def main(golden: Path) -> None:
    import verifiers.v1 as vf

    worker = load_worker()
    cases = json.loads(golden.read_text())["cases"]
    runner = web.AppRunner(scripted_app(cases))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    os.environ["RLVR_SCRIPTED_KEY"] = "scripted"
    client = vf.EvalClientConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key_var="RLVR_SCRIPTED_KEY")
    try:
        for i, case in enumerate(cases):
            env = vf.load_environment(worker.env_config({"taskset": {
                "id": "v1-credit-suite", "suite_task": case["task"], "task_params": case["params"], "num_tasks": 1}}))
            (task,) = list(env.taskset)
            async with env.serving():
                ctx = vf.ModelContext(model=f"case-{i}", client=client)
                traces, error = await worker.run_episode(env, task, ctx, EPISODE_TIMEOUT_S)
            worker.send({"case": i, "traces": traces, "error": error})
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
