"""The weight-version middleware on its own (pure ASGI: a small ASGI app stands in for vLLM's routes here; the real
server's tags are checked in test_weight_sync.py against a live update)."""

from __future__ import annotations

import asyncio
import json

from rlvr.serve.versions import WeightVersionMiddleware, tag_answer


class Gate:
    version = 3


def app_answering(status: int, content_type: bytes, chunks: list[bytes], gate: Gate, bump: bool = False):
    async def app(scope, receive, send):
        if bump:
            gate.version += 1  # an update completes while the request is generated
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type), (b"content-length", b"999")]})
        for i, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})
    return app


def call(app, path: str = "/v1/chat/completions") -> tuple[dict, bytes]:
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    asyncio.run(app({"type": "http", "path": path, "method": "POST"}, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_tag_answer_adds_both_versions_to_a_json_object_only():
    assert json.loads(tag_answer(b'{"id": "x"}', 2, 3)) == {"id": "x", "weight_version": 2, "weight_version_end": 3}
    assert tag_answer(b"[1, 2]", 2, 3) == b"[1, 2]"
    assert tag_answer(b"not json", 2, 3) == b"not json"


def test_a_generation_answer_is_tagged_with_the_versions_at_arrival_and_departure():
    gate = Gate()
    body = json.dumps({"choices": [{"logprobs": -0.5}]}).encode()
    start, out = call(WeightVersionMiddleware(app_answering(200, b"application/json", [body[:7], body[7:]], gate,
                                                            bump=True), gate))
    assert json.loads(out) == {"choices": [{"logprobs": -0.5}], "weight_version": 3, "weight_version_end": 4}
    assert dict(start["headers"])[b"content-length"] == str(len(out)).encode()


def test_other_routes_errors_and_streams_pass_through_untouched():
    gate = Gate()
    for path, status, content_type in [("/v1/models", 200, b"application/json"),
                                       ("/v1/chat/completions", 400, b"application/json"),
                                       ("/v1/chat/completions", 200, b"text/event-stream")]:
        _, out = call(WeightVersionMiddleware(app_answering(status, content_type, [b'{"a": 1}'], gate), gate), path)
        assert out == b'{"a": 1}'
