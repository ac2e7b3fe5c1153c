"""HTTP credentials for the whole server (UI and REST alike), as a small pure-ASGI middleware.

When ``COSYEDGE_AUTH=user:password`` is set every request must carry either HTTP Basic credentials
(browsers prompt for them and then send them with every fetch, SSE and WebSocket request of the page)
or ``Authorization: Bearer <password>`` (what the OpenAI client sends as its ``api_key``).
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
from typing import Any, Awaitable, Callable

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def parse_credentials(auth: str) -> tuple[str, str]:
    """Split ``user:password`` (the password may itself contain ':')."""
    user, _, password = auth.partition(":")
    if not user or not password:
        raise ValueError("credentials must look like user:password")
    return user, password


def authorized(header: str | None, user: str, password: str) -> bool:
    """True when an Authorization header value matches (constant-time comparisons).

    ``header`` is the value as the server read it (latin-1: one character per byte). Credentials
    are compared as UTF-8, what browsers put in Basic and curl sends after "Bearer", so a password
    such as "密码" works; junk (non-ASCII where base64 belongs) is simply not authorized.
    """
    if not header:
        return False
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "basic":
        try:
            given = base64.b64decode(value, validate=True).decode("utf-8")
        except ValueError:  # binascii.Error, UnicodeDecodeError, non-ASCII text
            return False
        given_user, _, given_password = given.partition(":")
        user_ok = hmac.compare_digest(given_user.encode(), user.encode())
        password_ok = hmac.compare_digest(given_password.encode(), password.encode())
        return user_ok and password_ok
    if scheme.lower() == "bearer":
        return hmac.compare_digest(_sent_bytes(value), password.encode())
    return False


def _sent_bytes(value: str) -> bytes:
    """The bytes of a header value read as latin-1 (a str not from the wire: its UTF-8)."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode()


class BasicAuthMiddleware:
    """Reject every HTTP/WebSocket request without valid credentials (401 + WWW-Authenticate)."""

    def __init__(self, app: ASGIApp, credentials: str, realm: str = "cosyedge") -> None:
        self.app = app
        self.user, self.password = parse_credentials(credentials)
        self.realm = realm

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        if authorized(header, self.user, self.password):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": {"type": "unauthorized",
                                     "message": "credentials required (COSYEDGE_AUTH is set)"}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", f'Basic realm="{self.realm}"'.encode())]})
        await send({"type": "http.response.body", "body": body})
