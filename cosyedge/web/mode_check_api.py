"""REST routes of the speed-mode check: the same service calls as the Models tab's button.

* ``POST /models/{id}/check`` (body optional: ``{"voice": "<preset or saved voice id>"}``): starts the
  check of the served model as low-priority background work; 202 with its status. 409
  ``mode_check_not_served`` for another model (switch first), ``mode_check_running`` while one runs;
  400 ``mode_check_no_modes`` (a model without speed modes), ``mode_check_needs_voice`` (no presets
  and no voice given).
* ``GET /models/{id}/check``: this process's run (``status``: state, progress, voice, error) and the
  stored record (``result``: figures and verdict per mode, thresholds, versions, date; null before
  the first check) with ``current`` (false: the model was reconverted since, the verdicts are stale).
* ``DELETE /models/{id}/check``: cancels the running check; the previous record stays.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from cosyedge.service.facade import Service

logger = logging.getLogger(__name__)


class CheckBody(BaseModel):
    """``POST /models/{id}/check`` body (optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    voice: str | None = Field(None, description="A preset speaker or a saved voice id (default: the model's first "
                                                "preset; a model without presets needs one)")


def mode_check_router(service: Service, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    """The check's routes, bound to one service; ``errors`` documents the error shape."""
    router = APIRouter(tags=["models"])

    @router.post("/models/{model_id}/check", status_code=202, responses=errors)
    async def start_check(model_id: str, body: CheckBody | None = None) -> dict[str, Any]:
        """Start the speed-mode check of the served model; 202 with its status."""
        voice = body.voice if body is not None else None
        status = await asyncio.to_thread(service.check_modes, model_id, voice)
        return {"status": status}

    @router.get("/models/{model_id}/check", responses=errors)
    async def check_result(model_id: str) -> dict[str, Any]:
        """The running check's status and the stored verdicts (``current`` false: stale)."""
        return await asyncio.to_thread(service.mode_check, model_id)

    @router.delete("/models/{model_id}/check", responses=errors)
    async def cancel_check(model_id: str) -> dict[str, Any]:
        """Cancel the running check of ``model_id``; the previous verdicts stay."""
        return {"cancelled": service.cancel_mode_check(model_id)}

    return router
