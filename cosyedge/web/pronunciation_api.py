"""REST routes for the box's pronunciation dictionary (docs/pronunciation.md): the same service
calls as the page's "Pronunciation / 读音" tab and the ``pronunciations`` command.

* ``GET /pronunciations``: every entry, the file's unreadable lines and where a damaged file was kept.
* ``POST /pronunciations`` ``{"language": "zh", "word": "银行", "reading": "yin2 hang2"}``: add or
  replace an entry; a bad one is a 400 whose code says what is wrong and whose params name the word.
* ``DELETE /pronunciations/{language}/{word}``: delete one (404 ``reading_entry_unknown``).
* ``POST /pronunciations/import`` with a TSV as the body (``language<TAB>word<TAB>reading``): adds or
  replaces its entries, keeps its good lines and lists the bad ones.
* ``GET /pronunciations/export``: the dictionary as TSV.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from cosyedge.service.facade import Service

logger = logging.getLogger(__name__)

#: The largest TSV an import reads (refused from its declared length before the body is read).
MAX_IMPORT_BYTES = 1_000_000


class EntryBody(BaseModel):
    """``POST /pronunciations`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    language: Literal["zh", "en", "ja"]
    word: str = Field(description="The word as written: 银行, Nice, 東京")
    reading: str = Field(description="zh: toned pinyin per character (yin2 hang2); en: IPA (/niːs/) or ARPAbet "
                                     "(N IY1 S); ja: kana")


def pronunciation_router(service: Service) -> APIRouter:
    """The dictionary routes, bound to one service."""
    router = APIRouter(tags=["pronunciations"])

    @router.get("/pronunciations")
    async def entries() -> dict[str, Any]:
        return await asyncio.to_thread(service.pronunciation_entries)

    @router.post("/pronunciations")
    async def add(body: EntryBody) -> dict[str, Any]:
        return await asyncio.to_thread(service.add_pronunciation, body.language, body.word, body.reading)

    @router.delete("/pronunciations/{language}/{word}")
    async def delete(language: str, word: str) -> dict[str, Any]:
        return await asyncio.to_thread(service.delete_pronunciation, language, word)

    @router.post("/pronunciations/import")
    async def import_tsv(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_IMPORT_BYTES:
            data = b"x" * (MAX_IMPORT_BYTES + 1)  # the book refuses it by size, in its own words
        else:
            data = await request.body()
        return await asyncio.to_thread(service.import_pronunciations, data)

    @router.get("/pronunciations/export", response_class=Response)
    async def export() -> Response:
        text = await asyncio.to_thread(service.export_pronunciations)
        return Response(text, media_type="text/tab-separated-values; charset=utf-8",
                        headers={"Content-Disposition": 'attachment; filename="pronunciations.tsv"'})

    return router
