"""REST routes for the saved-voice library, beside ``/voices`` (the list) and OpenAI's
``/v1/audio/voices`` (save, delete):

* ``POST /voices/{id}/rename`` with ``{"name": "..."}``: another name, the same id.
* ``GET /voices/{id}/export``: the voice file (``<id>.voice.zip``) with its encodings for the models
  on this box.
* ``POST /voices/import?name=&rename=&overwrite=`` with the voice file as the body
  (``curl --data-binary @ms-lee.voice.zip``): saved under the id it had; an id already here is
  refused (409 ``voice_exists``) unless ``rename=true`` (a copy, under ``name`` or its own name
  numbered) or ``overwrite=true``. The answer names the models whose encodings were reused (no
  encoding needed there) and each left out with why.
* ``GET /voices/library``: how full the library is against its bounds (``room``: about how many more
  voices fit).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from cosyedge.service.facade import Service


class Rename(BaseModel):
    name: str


def voice_router(service: Service, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    """The library routes, bound to one service."""
    router = APIRouter(tags=["voices"])

    @router.get("/voices/library", responses=errors)
    async def library() -> dict[str, Any]:
        """The voices saved and their megabytes against the bounds, and about how many more fit."""
        return (await asyncio.to_thread(service.library.usage)).as_dict()

    @router.post("/voices/{voice_id}/rename", responses=errors)
    async def rename(voice_id: str, body: Rename) -> dict[str, Any]:
        """Another name for a saved voice; its id stays, so references to it keep working."""
        info = await asyncio.to_thread(service.rename_voice, voice_id, body.name)
        return {"id": info.id, "name": info.name}

    @router.get("/voices/{voice_id}/export", responses={200: {"content": {"application/zip": {}}}, **errors})
    async def export(voice_id: str) -> Response:
        """The voice file, with the encodings made for the models on this box."""
        data = await asyncio.to_thread(service.export_voice, voice_id)
        return Response(data, media_type="application/zip",
                        headers={"Content-Disposition": f'attachment; filename="{voice_id}.voice.zip"'})

    @router.post("/voices/import", responses=errors)
    async def import_voice(request: Request, name: str | None = None, rename: bool = False,
                           overwrite: bool = False) -> dict[str, Any]:
        """A voice file as the body; see the module docstring for ``rename`` and ``overwrite``."""
        data = await request.body()
        done = await asyncio.to_thread(service.import_voice, data, name or None, rename=rename,
                                       overwrite=overwrite)
        return done.as_dict()

    return router
