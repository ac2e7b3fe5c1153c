"""The page's upload route, guarded: refused while the disk is nearly full, and the upload cache kept
under its cap right after each upload.

Gradio writes every upload (a prompt, a recording, a lesson file) into its cache before any handler
sees it, so neither the service's job check nor the periodic janitor can stop a flood of uploads in
time. :class:`UploadGuardMiddleware` sits in front of that route: before the upload it asks
``check_room`` (the service's free-disk check; a refusal is the REST error shape, 507 with the code
``disk_low``); after it, ``after_upload`` (the janitor's upload sweep) runs in a worker thread
before the answer's last part is sent.
"""

from __future__ import annotations

import logging
from typing import Callable

from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cosyedge.errors import CosyedgeError
from cosyedge.web.api import error_response

logger = logging.getLogger(__name__)

#: Where Gradio takes uploads (its API prefix, and the bare path older clients use).
UPLOAD_PATHS = ("/gradio_api/upload", "/upload")


class UploadGuardMiddleware:
    """Pure ASGI middleware (a streamed multipart body passes through untouched)."""

    def __init__(self, app: ASGIApp, check_room: Callable[[], None], after_upload: Callable[[], object],
                 paths: tuple[str, ...] = UPLOAD_PATHS) -> None:
        self.app = app
        self.check_room = check_room
        self.after_upload = after_upload
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope.get("method") != "POST"
                or scope.get("path", "").rstrip("/") not in self.paths):
            await self.app(scope, receive, send)
            return
        try:
            self.check_room()
        except CosyedgeError as exc:
            response = error_response(exc.http_status, exc.kind, exc.message, code=exc.code)
            await response(scope, receive, send)
            return
        swept = False

        async def sweep() -> None:
            nonlocal swept
            if swept:
                return
            swept = True
            try:
                await run_in_threadpool(self.after_upload)
            except Exception:  # the upload itself went through; a failed sweep is only logged
                logger.exception("upload cache sweep failed")

        async def send_after_sweep(message: Message) -> None:
            # the answer's last part waits for the sweep: a client that has its answer finds the
            # cache within its cap again
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await sweep()
            await send(message)

        try:
            await self.app(scope, receive, send_after_sweep)
        finally:
            await sweep()
