"""REST routes for long lessons: the same service calls as the page's lesson box.

* ``POST /lessons?speaker=…&voice_id=…&speed=…&language=…&instruct=…&per_paragraph=true&filename=week1.md``
  with the lesson file's bytes as the body (``curl --data-binary @week1.md``): checked at once
  (UTF-8, the lesson limit, .txt/.md by ``filename``; the same coded errors as the page) and queued;
  answers 202 with the job id and where to fetch the result. A lesson takes minutes, so the answer
  does not wait: ``GET /jobs/{id}`` tells its phase (``paragraph 3/12, about 4 min 10 s left``) and
  ``DELETE /jobs/{id}`` cancels it.
* ``GET /lessons/{id}/audio`` and ``GET /lessons/{id}/zip``: the finished WAV, or the zip of one WAV
  (and its captions) per paragraph; 202 with the job's state while it runs; the job's own error once
  it failed.
* ``GET /lessons/{id}/captions?format=vtt`` (or ``srt``): the whole lesson's captions, one cue per
  sentence at the WAV's offsets.

A lesson in a cloned voice uses a saved voice (``voice_id``): prompt audio is not taken here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse

from cosyedge.errors import NotFoundError
from cosyedge.service.captions import caption_format
from cosyedge.service.lessons import LessonResult, check_lesson_size
from cosyedge.service.facade import Service
from cosyedge.service.requests import TTSRequest

logger = logging.getLogger(__name__)

#: The media types of the caption files.
CAPTION_TYPES = {"vtt": "text/vtt; charset=utf-8", "srt": "application/x-subrip; charset=utf-8"}


def lesson_router(service: Service) -> APIRouter:
    """The lesson routes, bound to one service."""
    router = APIRouter(tags=["lessons"])

    @router.post("/lessons", status_code=202)
    async def submit_lesson(request: Request, filename: str = "lesson.txt", speaker: str | None = None,
                            voice_id: str | None = None, speed: float = 1.0, language: str = "auto",
                            instruct: str | None = None, per_paragraph: bool = False) -> dict[str, Any]:
        """Queue a lesson file (the body) read in the given voice; 202 with the job id."""
        declared = request.headers.get("content-length")
        if declared and declared.isdigit():
            check_lesson_size(int(declared), service.max_lesson_chars)  # before the body is read
        data = await request.body()
        lesson = await asyncio.to_thread(service.read_lesson, data, filename)
        tts = TTSRequest(text="", speaker=speaker, voice_id=voice_id, speed=speed, language=language,
                         instruct=instruct)
        job = await asyncio.to_thread(service.submit_lesson, lesson, tts, None, per_paragraph)
        return {"job_id": job.id, "paragraphs": len(lesson.paragraphs), "characters": lesson.chars,
                "status": f"/jobs/{job.id}", "audio": f"/lessons/{job.id}/audio",
                "captions": f"/lessons/{job.id}/captions?format=vtt",
                "zip": f"/lessons/{job.id}/zip" if per_paragraph else None}

    async def finished(job_id: str) -> LessonResult | JSONResponse:
        job = service.job(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r}", code="job_unknown", job_id=job_id)
        if not job.finished:
            return JSONResponse({"job_id": job.id, "state": job.state.value, "phase": job.phase,
                                 "done": job.done_steps, "total": job.total_steps}, status_code=202)
        result = job.outcome()  # the job's own error (cancelled, disk full, ...) is raised here
        if not isinstance(result, LessonResult):
            raise NotFoundError(f"job {job_id!r} is not a lesson", code="lesson_unknown", job_id=job_id)
        return result

    @router.get("/lessons/{job_id}/audio", response_model=None)
    async def lesson_audio(job_id: str) -> Any:
        """The finished lesson's WAV (202 with its state while it runs)."""
        result = await finished(job_id)
        if isinstance(result, JSONResponse):
            return result
        service.lease(result.path)
        return FileResponse(result.path, media_type="audio/wav", filename=f"{job_id}.wav")

    @router.get("/lessons/{job_id}/zip", response_model=None)
    async def lesson_zip(job_id: str) -> Any:
        """The zip of one WAV per paragraph, when the lesson asked for it."""
        result = await finished(job_id)
        if isinstance(result, JSONResponse):
            return result
        if result.zip_path is None:
            raise NotFoundError(f"lesson {job_id!r} was read without per_paragraph: it has no zip",
                                code="lesson_unknown", job_id=job_id)
        service.lease(result.zip_path)
        return FileResponse(result.zip_path, media_type="application/zip", filename=f"{job_id}.zip")

    @router.get("/lessons/{job_id}/captions", response_model=None)
    async def lesson_captions(job_id: str, format: str = "vtt") -> Any:  # noqa: A002 - the query's name
        """The finished lesson's captions as WebVTT (``format=vtt``) or SubRip (``format=srt``)."""
        fmt = caption_format(format)
        result = await finished(job_id)
        if isinstance(result, JSONResponse):
            return result
        path = result.caption_files[fmt]
        service.lease(path)
        return FileResponse(path, media_type=CAPTION_TYPES[fmt], filename=f"{job_id}.{fmt}")

    return router
