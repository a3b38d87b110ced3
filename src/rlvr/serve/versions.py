"""Weight versions on generated answers: which weights sampled a request's tokens.

`WeightUpdateGate` lets no request run on two sets of weights (running requests finish before a load, new ones wait
for it), so each answer was sampled with one version. Which one is only certain when no update started while the
request was in the server: the middleware records the gate's version when the request arrives and when its answer
leaves, and adds both to the answer's JSON (`weight_version`, `weight_version_end`). Equal: that version exactly.
Different: one of the versions in between; a trainer counting staleness takes the older (an upper bound).

vLLM 0.32's engine tracks per-token version spans itself (`CompletionOutput.weight_versions`), but its OpenAI routes
do not return them; the gate's request-level tag is exact whenever it matters less than a version apart.
Pure ASGI (no FastAPI import), like `rlvr.serve.admin`; streamed answers pass through untagged.
"""

from __future__ import annotations

import json
from typing import Any

from rlvr.serve.protocol import (
    GENERATION_PATHS,
    WEIGHT_VERSION_END_FIELD,
    WEIGHT_VERSION_FIELD,
    WEIGHT_VERSION_PATH,
)


def tag_answer(body: bytes, first: int, last: int) -> bytes:
    """The JSON answer with the two version fields added (an answer that is not a JSON object is left alone)."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    if not isinstance(answer, dict):
        return body
    answer[WEIGHT_VERSION_FIELD] = first
    answer[WEIGHT_VERSION_END_FIELD] = last
    return json.dumps(answer).encode()


class WeightVersionMiddleware:
    """Tags the successful JSON answers of `GENERATION_PATHS` with the gate's weight versions (module docstring)."""

    def __init__(self, app: Any, gate: Any) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        first = self.gate.version
        held: dict | None = None  # the response start, held back until the whole JSON body is known
        chunks: list[bytes] = []

        async def tagged_send(message: dict) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                content_type = dict(message.get("headers") or []).get(b"content-type", b"")
                if message["status"] == 200 and content_type.startswith(b"application/json"):
                    held = message
                    return
            elif message["type"] == "http.response.body" and held is not None:
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = tag_answer(b"".join(chunks), first, self.gate.version)
                headers = [(k, v) for k, v in held.get("headers") or [] if k.lower() != b"content-length"]
                await send({**held, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        await self.app(scope, receive, tagged_send)


def add_version_route(app: Any, gate: Any) -> None:
    """``GET /rlvr/weight_version``: the version the next request will be sampled with (after any update under way)."""

    @app.get(WEIGHT_VERSION_PATH)
    async def weight_version() -> dict:
        return {WEIGHT_VERSION_FIELD: gate.version}
