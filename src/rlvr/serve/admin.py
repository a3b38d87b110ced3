"""The admin token check: pure ASGI middleware (no FastAPI import), installed only on a non-loopback bind."""

from __future__ import annotations

import hmac
import json
from typing import Any

from rlvr.serve.protocol import ADMIN_HEADER, ADMIN_PATHS, ADMIN_TOKEN_ENV


def token_ok(expected: str, headers: list[tuple[bytes, bytes]]) -> bool:
    given = dict(headers).get(ADMIN_HEADER.lower().encode(), b"")
    # Constant-time comparison so the token cannot be guessed byte by byte from response times.
    return hmac.compare_digest(given, expected.encode())


class AdminTokenMiddleware:
    """Requests to `ADMIN_PATHS` without the right `X-RLVR-Admin-Token` header get 403.

    Only installed when the server binds a non-loopback address, so a local server pays nothing per request.
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] in ADMIN_PATHS
            and not token_ok(self.token, scope["headers"])
        ):
            body = json.dumps(
                {
                    "error": f"{scope['path']} needs the admin token: this server binds a non-loopback address; "
                    f"send it in the {ADMIN_HEADER} header (the value of --admin-token / ${ADMIN_TOKEN_ENV})"
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
