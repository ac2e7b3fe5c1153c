"""REST routes over the one :class:`~cosyedge.service.facade.Service`.

* ``POST /tts``: the seed's route (``{"text","speaker","speed"}`` -> base64 WAV JSON), extended with
  ``voice_id``, ``instruct``, ``prompt_audio`` (base64), ``prompt_text``, ``language`` and ``job_id``.
* ``POST /v1/audio/speech``: OpenAI-compatible; returns audio bytes (wav, pcm, mp3, opus, flac).
  With ``"stream_format": "audio"`` and wav or pcm, the audio is streamed: the first bytes leave as
  soon as the first chunk is made. Errors before that are the usual JSON; after it the stream just
  ends early and the failure is logged (see docs/web.md).
* ``GET /models``, ``POST /models/switch`` (``{"model": id}``; 409 while jobs run or wait); the
  speed-mode check, ``POST|GET|DELETE /models/{id}/check``: :mod:`cosyedge.web.mode_check_api`.
* ``GET /health``, ``GET /voices``, ``GET /jobs``, ``GET /jobs/{id}``, ``DELETE /jobs/{id}`` (cancel).
* ``GET /jobs/{id}/audio?token=...``: a streaming job's audio as a WAV stream from its start (the
  page's live player; the token is the stream's own, never listed).
* ``/v1/models``, ``/v1/audio/models``, ``/v1/audio/voices`` (list, create, delete) and how
  ``/v1/audio/speech`` reads ``model`` and ``voice``: :mod:`cosyedge.web.openai_routes`.

Every error is ``{"error": {"type", "code", "message", "param"}}`` (OpenAI's shape) with its
4xx/5xx status (429 carries Retry-After; ``code`` names the exact refusal, see cosyedge.errors),
including a body that is not a JSON object, a wrong method on a REST path (405 with Allow) and an
unknown path (404), though the page is mounted at "/" (:class:`RouteErrorMiddleware`).
A request whose client disconnects while its job waits or runs cancels that job.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import logging
import re
import secrets
from typing import Any, AsyncIterator, Callable, Literal
from urllib.parse import unquote

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from cosyedge import __version__
from cosyedge.audio import to_pcm16, wav_bytes, wav_stream_header
from cosyedge.errors import (AudioError, BusyError, CancelledError, CosyedgeError, NotFoundError,
                             ParameterError, PayloadTooLargeError)
from cosyedge.notes import code_of
from cosyedge.service.jobs import Job
from cosyedge.service.facade import Service
from cosyedge.service.requests import QUALITY_NAMES, TTSRequest, TTSResult
from cosyedge.service.streaming import AudioStream
from cosyedge.web.openai_routes import VoiceRef, build_openai_router, check_model, voice_fields
from cosyedge.web.lesson_api import lesson_router
from cosyedge.web.pronunciation_api import pronunciation_router
from cosyedge.web.mode_check_api import mode_check_router
from cosyedge.web.voice_api import voice_router

logger = logging.getLogger(__name__)

#: Name prefix of files being written (cosyedge.audio.write_wav_atomic); never served.
TEMP_PREFIX = ".tmp-"
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "mp3": "audio/mpeg", "opus": "audio/ogg",
               "flac": "audio/flac"}
#: Formats streamed when ``stream_format`` is "audio"; the others are answered whole (not streamed).
STREAM_FORMATS = ("wav", "pcm")
#: Rates libopus accepts; other rates are resampled to 48 kHz for opus output.
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


class ErrorBody(BaseModel):
    type: str
    code: str = Field(description="Which refusal exactly: stable (the type when there is no finer code)")
    message: str
    param: str | None = Field(None, description="Always null; OpenAI's error shape has it")


class ErrorResponse(BaseModel):
    error: ErrorBody


#: The ``flow_steps`` field's description, the same in both synthesis bodies.
FLOW_STEPS_HELP = ("CosyVoice flow-matching steps, 1-10 (default: the quality mode's; in exact mode the model's, "
                   "upstream's 10; fewer are faster and not validated on real weights); wins over the quality "
                   "mode's steps; the answer's notes state the steps used")
#: The ``quality`` field's description, the same in both synthesis bodies.
QUALITY_HELP = (f"CosyVoice speed mode, one of {', '.join(QUALITY_NAMES)} (default: the server's, COSYEDGE_QUALITY; "
                "exact = upstream's semantics); the others trade fidelity to upstream for speed and memory, "
                "are not validated on real weights, and the answer's notes name the levers they set "
                "(docs/models.md, \"Quality modes\"). Ignored, with a note, by engines without modes")


class TTSBody(BaseModel):
    """``POST /tts`` body: the seed's three fields plus optional extensions."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(description="Text to read; may carry [zh]/[en]/[ja] tags")
    speaker: str | None = Field(None, description="Preset voice, e.g. female_1 (default: first preset)")
    speed: float = Field(1.0, description="0.5-2.0")
    voice_id: str | None = Field(None, description="A saved voice")
    instruct: str | None = Field(None, description="Natural-language instruction")
    prompt_audio: str | None = Field(None, description="Base64 audio file (WAV/FLAC/OGG/MP3) to clone")
    prompt_text: str | None = Field(None, description="Transcript of prompt_audio")
    consent: bool = Field(False, description="true: the speaker of prompt_audio agreed to have their "
                                             "voice cloned (required with prompt_audio)")
    language: Literal["auto", "zh", "en", "ja", "ko", "de", "es", "fr", "it", "ru"] = "auto"  # ko..ru: CosyVoice3
    job_id: str | None = Field(None, description="Your id for this job, so DELETE /jobs/{id} can cancel it")
    flow_steps: int | None = Field(None, description=FLOW_STEPS_HELP)
    captions: Literal["srt", "vtt"] | None = Field(
        None, description='"vtt" or "srt": also answer the captions (one cue per sentence at the audio\'s '
                          "offsets; WebVTT with word timings where the engine knows them) and the cues as JSON")
    quality: str | None = Field(None, description=QUALITY_HELP)


class TTSResponse(BaseModel):
    audio: str = Field(description="Base64 16-bit mono WAV")
    duration: float
    sample_rate: int
    job_id: str
    engine: str
    model: str
    voice: str
    voice_match: str
    similarity: float | None = Field(None, description="Speaker similarity to prompt_audio, if measured")
    instruct: dict[str, Any]
    notes: list[str] = Field(default_factory=list,
                             description="Request fields that had no effect, each with the reason")
    skipped: list[str] = Field(default_factory=list,
                               description="Text not read aloud (other languages' tags, unsupported "
                                           "scripts), one line per tag or script")
    transcript: dict[str, Any] | None = Field(
        None, description="A native clone's prompt transcript: text, source (user: prompt_text or the saved "
                          "voice's; asr: heard offline), confidence, language, trusted (used for zero-shot)")
    clone_mode: str | None = Field(None, description="A native clone's mode: zero_shot, cross_lingual or instruct")
    captions: str | None = Field(None, description="The captions file's text, in the format asked for")
    caption_format: str | None = Field(None, description="srt or vtt, when captions were asked for")
    cues: list[dict[str, Any]] | None = Field(
        None, description="The captions as JSON, when asked for: start, end (seconds), text, words "
                          "(each with start, end, text; empty where the engine does not time its words)")


class TranscribeBody(BaseModel):
    """``POST /transcribe`` body: prompt audio to hear offline before cloning with it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    prompt_audio: str = Field(description="Base64 audio file (WAV/FLAC/OGG/MP3)")
    consent: bool = Field(False, description="true: the speaker of prompt_audio agreed (required)")
    language: Literal["auto", "zh", "en", "ja", "ko", "de", "es", "fr", "it", "ru"] = "auto"


class SwitchBody(BaseModel):
    """``POST /models/switch`` body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field(description="A model id from GET /models (its folder under models/)")


class SpeechBody(BaseModel):
    """OpenAI ``audio.speech.create`` body; unknown extra fields are ignored as OpenAI's are."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description="The loaded model (GET /v1/models), or tts-1 / tts-1-hd for it")
    input: str
    voice: str | VoiceRef = Field(description="A preset name (e.g. female_1), a saved voice id or "
                                              '{"id": ...}; OpenAI\'s names (alloy, nova, echo, onyx, '
                                              "...) map to the nearest preset")
    response_format: Literal["wav", "pcm", "mp3", "opus", "flac"] = "mp3"
    speed: float = Field(1.0, strict=True, description="0.5-2.0 (OpenAI's 0.25-4.0 is refused outside it)")
    instructions: str | None = None
    stream_format: Literal["audio"] | None = Field(
        None, description='"audio": stream wav/pcm as it is made (other formats come whole)')
    flow_steps: int | None = Field(None, strict=True, description=FLOW_STEPS_HELP)
    quality: str | None = Field(None, strict=True, description=QUALITY_HELP)


#: The error answers every route documents (OpenAPI).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 404, 413, 429, 503)}


def pcm_media_type(sample_rate: int) -> str:
    """Raw 16-bit little-endian mono. Not ``audio/L16``: that type is big-endian (RFC 2586), and a
    player trusting it would play these bytes as noise."""
    return f"audio/pcm; rate={sample_rate}; channels=1; bits=16; endianness=little"


#: The audio route's token in a logged path (uvicorn's access log writes each path with its query).
_TOKEN_QUERY = re.compile(r"([?&]token=)[^&\s]*")


class TokenRedactingFilter(logging.Filter):
    """Blank ``token=`` query values in log lines, so the access log never holds a stream's token."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_TOKEN_QUERY.sub(r"\1-", a) if isinstance(a, str) else a
                                for a in record.args)
        elif isinstance(record.msg, str) and not record.args:
            record.msg = _TOKEN_QUERY.sub(r"\1-", record.msg)
        return True


def install_log_redaction(logger_name: str = "uvicorn.access") -> None:
    """Add :class:`TokenRedactingFilter` to the access logger (once; the server entry point calls it)."""
    target = logging.getLogger(logger_name)
    if not any(isinstance(f, TokenRedactingFilter) for f in target.filters):
        target.addFilter(TokenRedactingFilter())


def error_response(status: int, kind: str, message: str, headers: dict[str, str] | None = None,
                   code: str | None = None) -> JSONResponse:
    """The one JSON error shape; ``code`` defaults to ``kind`` (errors with no finer code)."""
    return JSONResponse({"error": {"type": kind, "code": code or kind, "message": message, "param": None}},
                        status_code=status, headers=headers)


def decode_base64_audio(data: str) -> bytes:
    """Strict base64 (a ``data:...;base64,`` prefix is allowed)."""
    if data.startswith("data:") and "," in data:
        data = data.split(",", 1)[1]
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AudioError("prompt_audio is not valid base64", code="prompt_not_base64") from exc


def encode_audio(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """Encode mono float audio; pcm is raw 16-bit little-endian at ``sample_rate``."""
    import soundfile as sf

    if fmt == "wav":
        return wav_bytes(audio, sample_rate)
    if fmt == "pcm":
        return to_pcm16(audio).astype("<i2").tobytes()
    buf = io.BytesIO()
    pcm = to_pcm16(audio)
    if fmt == "mp3":
        sf.write(buf, pcm, sample_rate, format="MP3", subtype="MPEG_LAYER_III")
    elif fmt == "opus":
        if sample_rate not in OPUS_RATES:
            import soxr

            audio = soxr.resample(audio.astype(np.float32), sample_rate, 48000)
            sample_rate, pcm = 48000, to_pcm16(audio)
        sf.write(buf, pcm, sample_rate, format="OGG", subtype="OPUS")
    elif fmt == "flac":
        sf.write(buf, pcm, sample_rate, format="FLAC", subtype="PCM_16")
    else:
        raise ParameterError(f"response_format {fmt!r} is not supported", code="response_format_unknown",
                             response_format=fmt)
    return buf.getvalue()


async def _client_gone(request: Request) -> None:
    """Return once the client has disconnected (the body has been read, so receive() waits for it)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _unless_client_leaves(task: "asyncio.Future[Any]", request: Request, job: Job, moment: str) -> Any:
    """``task``'s result, or :class:`CancelledError` if the client disconnects first (the caller
    cancels the job)."""
    watcher = asyncio.ensure_future(_client_gone(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            logger.info("client disconnected%s; cancelling job %s", moment, job.id)
            raise CancelledError("the client disconnected", code="client_disconnected")
        return task.result()
    finally:
        watcher.cancel()


async def run_job(service: Service, request: Request, tts: TTSRequest,
                  job_id: str | None = None) -> TTSResult:
    """Submit and await one job off the event loop; cancel it if the client goes away."""
    owner = f"rest:{request.client.host if request.client else '?'}"
    job = await asyncio.to_thread(service.submit, tts, owner, job_id)
    waiter = asyncio.ensure_future(job.wait_async())
    try:
        return await _unless_client_leaves(waiter, request, job, "")
    finally:
        if not job.finished:
            service.cancel(job.id)  # through the queue: a waiting job leaves the waiting list now
            waiter.cancel()


class ClosingStreamingResponse(StreamingResponse):
    """A streaming body that is always closed when the response ends, however it ends.

    A client that goes away shows up as an error from ``send`` (or a cancelled task); Starlette
    then leaves the body generator suspended, and its ``finally`` (cancel the job, stop reading the
    stream) would wait for the garbage collector. Here it runs at once, then ``on_close``.
    """

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._content = content
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self._content, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except RuntimeError:  # still running elsewhere: it ends with its task
                    logger.debug("stream body still running at close")
            if self._on_close is not None:
                self._on_close()


async def _first_piece(pieces: AsyncIterator[np.ndarray]) -> np.ndarray | None:
    """The first piece of a stream (None when it ended cleanly with no audio); the job's error if
    it failed before any audio."""
    try:
        return await pieces.__anext__()
    except StopAsyncIteration:
        return None


def _pcm_bytes(audio: np.ndarray) -> bytes:
    return to_pcm16(audio).astype("<i2").tobytes()


async def stream_job(service: Service, request: Request, tts: TTSRequest, fmt: str) -> StreamingResponse:
    """Submit a streaming job and answer once its first piece exists.

    Until then everything fails as a normal JSON error (bad input, busy, engine errors, cancel) and a
    client that disconnects cancels the job. After the first byte the status is sent: a later
    failure or cancel ends the stream early and is logged; a disconnect cancels the job.
    """
    owner = f"rest:{request.client.host if request.client else '?'}"
    job = await asyncio.to_thread(service.submit, tts, owner, None, True)
    stream = job.stream
    assert stream is not None  # submitted with stream=True
    pieces = stream.pieces_async()
    first_task = asyncio.ensure_future(_first_piece(pieces))
    try:
        first = await _unless_client_leaves(first_task, request, job, " before the first audio")
    except BaseException:
        service.cancel(job.id)
        first_task.cancel()
        raise
    info = stream.info
    sample_rate = info.sample_rate if info is not None else 0

    # Set once the stream's last piece went out: the job's tail (its result, scoring, history) may
    # still run then, and a client that read everything has not gone away.
    read_to_the_end = asyncio.Event()

    def stop_unfinished() -> None:
        if not job.finished and not read_to_the_end.is_set():  # the client went away before the end
            logger.info("stream of job %s stopped before the end; cancelling it", job.id)
            service.cancel(job.id)

    async def body() -> AsyncIterator[bytes]:
        sent = 0
        try:
            if fmt == "wav":
                yield wav_stream_header(sample_rate)
            if first is not None:
                data = _pcm_bytes(first)
                sent += len(data)
                yield data
            async for piece in pieces:
                data = _pcm_bytes(piece)
                sent += len(data)
                yield data
            read_to_the_end.set()
        except CosyedgeError as exc:  # failed or cancelled after the first byte: the stream ends here
            logger.warning("audio stream of job %s ended early after %d bytes of audio: %s: %s",
                           job.id, sent, exc.kind, exc.message)
        except Exception:
            logger.exception("audio stream of job %s broke after %d bytes of audio", job.id, sent)
        finally:
            await pieces.aclose()  # stop reading the stream now (release waits for its readers)
            stop_unfinished()

    media = MEDIA_TYPES[fmt] if fmt == "wav" else pcm_media_type(sample_rate)
    report = dict(info.report) if info is not None else {}
    report["similarity"] = None  # measured on the whole audio, after the stream
    headers = {"X-Cosyedge-Engine": f"{info.engine}/{info.model_id}" if info is not None else "",
               "X-Cosyedge-Sample-Rate": str(sample_rate), "X-Cosyedge-Job-Id": job.id,
               "X-Cosyedge-Streamed": "true", "X-Cosyedge-Report": json.dumps(report, ensure_ascii=True)}
    return ClosingStreamingResponse(body(), stop_unfinished, media_type=media, headers=headers)


async def _wav_stream(job_id: str, stream: AudioStream) -> AsyncIterator[bytes]:
    """WAV header (once the rate is known, with the first piece) then each piece as 16-bit PCM;
    a job that fails or is cancelled just ends the stream (the page shows the error itself)."""
    started = False
    pieces = stream.pieces_async()
    try:
        async for piece in pieces:
            if not started:
                info = stream.info
                assert info is not None  # the worker starts the stream before its first piece
                yield wav_stream_header(info.sample_rate)
                started = True
            yield _pcm_bytes(piece)
    except CosyedgeError as exc:
        logger.info("audio stream of job %s ended early: %s: %s", job_id, exc.kind, exc.message)
    except RuntimeError as exc:  # released: the job finished long ago
        logger.info("audio stream of job %s: %s", job_id, exc)
    finally:
        await pieces.aclose()  # stop reading now (release waits for its readers)


def _report_header(result: TTSResult) -> str:
    return json.dumps({"voice": result.voice, "voice_match": result.voice_match,
                       "similarity": result.similarity, "instruct": result.instruct,
                       "notes": result.notes, "skipped": result.skipped, "transcript": result.transcript,
                       "clone_mode": result.clone_mode}, ensure_ascii=True)


def build_router(service: Service) -> APIRouter:
    """All REST routes, bound to one service (no globals)."""
    router = APIRouter()
    errors = ERROR_RESPONSES

    @router.post("/tts", response_model=TTSResponse, responses=errors, tags=["tts"])
    async def tts(body: TTSBody, request: Request) -> TTSResponse:
        """Synthesize text; answers base64 WAV plus a report of what the engine did."""
        prompt = decode_base64_audio(body.prompt_audio) if body.prompt_audio is not None else None
        req = TTSRequest(text=body.text, speaker=body.speaker, voice_id=body.voice_id,
                         prompt_audio=prompt, prompt_text=body.prompt_text, instruct=body.instruct,
                         speed=body.speed, language=body.language, consent=body.consent,
                         flow_steps=body.flow_steps, quality=body.quality)
        result = await run_job(service, request, req, body.job_id)
        wav = await asyncio.to_thread(wav_bytes, result.audio, result.sample_rate)
        return TTSResponse(audio=base64.b64encode(wav).decode("ascii"),
                           duration=round(result.duration, 4), sample_rate=result.sample_rate,
                           job_id=result.job_id, engine=result.engine, model=result.model_id,
                           voice=result.voice, voice_match=result.voice_match,
                           similarity=result.similarity, instruct=result.instruct,
                           notes=result.notes, skipped=result.skipped, transcript=result.transcript,
                           clone_mode=result.clone_mode,
                           captions=result.captions.render(body.captions) if body.captions else None,
                           caption_format=body.captions,
                           cues=result.captions.as_dicts() if body.captions else None)

    @router.post("/transcribe", responses=errors, tags=["tts"])
    async def transcribe(body: TranscribeBody, request: Request) -> dict[str, Any]:
        """Hear prompt audio offline, as a queued job: the transcript to check or edit before sending
        it as ``prompt_text`` (``trusted``: confident enough for a zero-shot clone as it is)."""
        prompt = decode_base64_audio(body.prompt_audio)
        owner = f"rest:{request.client.host if request.client else '?'}"
        job = await asyncio.to_thread(service.submit_transcription, prompt, body.language, owner,
                                      consent=body.consent)
        waiter = asyncio.ensure_future(job.wait_async())
        try:
            heard = await _unless_client_leaves(waiter, request, job, "")
        finally:
            if not job.finished:
                service.cancel(job.id)
                waiter.cancel()
        return {"job_id": job.id, **heard.as_dict()}

    @router.post("/v1/audio/speech", responses={200: {"content": {t: {} for t in MEDIA_TYPES.values()}},
                                                **errors}, response_class=Response, tags=["openai"])
    async def speech(body: SpeechBody, request: Request) -> Response:
        """OpenAI-compatible speech; the audio bytes come back in the requested format."""
        check_model(service, body.model)
        req = TTSRequest(text=body.input, **voice_fields(service, body.voice), speed=body.speed,
                         instruct=body.instructions, flow_steps=body.flow_steps, quality=body.quality)
        if body.stream_format == "audio" and body.response_format in STREAM_FORMATS:
            return await stream_job(service, request, req, body.response_format)
        result = await run_job(service, request, req)
        data = await asyncio.to_thread(encode_audio, result.audio, result.sample_rate,
                                       body.response_format)
        media = MEDIA_TYPES[body.response_format]
        if body.response_format == "pcm":
            media = pcm_media_type(result.sample_rate)
        return Response(data, media_type=media,
                        headers={"X-Cosyedge-Engine": f"{result.engine}/{result.model_id}",
                                 "X-Cosyedge-Sample-Rate": str(result.sample_rate),
                                 "X-Cosyedge-Job-Id": result.job_id, "X-Cosyedge-Streamed": "false",
                                 "X-Cosyedge-Report": _report_header(result)})

    @router.api_route("/health", methods=["GET", "HEAD"], tags=["status"])  # probes often use HEAD
    async def health() -> dict[str, Any]:
        """Engine, loaded or not, queue and thermal state, the running commit and the OTA update's
        state (pending, rolled back). Never loads the model."""
        return {"status": "ok", "version": __version__, **service.status().as_dict(),
                **service.update_status().as_dict()}

    @router.get("/voices", tags=["status"])
    async def voices() -> dict[str, Any]:
        """Preset and saved voices."""
        return service.voices()

    @router.get("/models", tags=["models"])
    async def models() -> dict[str, Any]:
        """The usable models under models/ (engine, capabilities, size, licence) and which is served."""
        return await asyncio.to_thread(service.models)

    @router.post("/models/switch", responses=errors, tags=["models"])
    async def switch_model(body: SwitchBody) -> dict[str, Any]:
        """Serve another model from the next job on; 409 (``model_switch_busy``) while jobs run or wait."""
        info = await asyncio.to_thread(service.switch_model, body.model)
        return {"current": info.id, "model": info.as_dict()}

    @router.get("/jobs", tags=["jobs"])
    async def jobs() -> dict[str, Any]:
        """Running and waiting jobs."""
        return {"jobs": [_job_info(service, job) for job in service.active_jobs()]}

    @router.get("/jobs/{job_id}", responses=errors, tags=["jobs"])
    async def job_status(job_id: str) -> dict[str, Any]:
        job = service.job(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r}", code="job_unknown", job_id=job_id)
        return _job_info(service, job)

    @router.get("/jobs/{job_id}/audio", responses={200: {"content": {"audio/wav": {}}}, **errors},
                response_class=StreamingResponse, tags=["jobs"])
    async def job_audio(job_id: str, token: str = "") -> StreamingResponse:
        """A streaming job's audio from its start, as a WAV stream of unknown length (the page's
        live player). Reading it does not cancel the job; the job's owner does that."""
        job = service.job(job_id)
        stream = job.stream if job is not None else None
        if stream is None or not secrets.compare_digest(stream.token.encode(), token.encode()):
            raise NotFoundError(f"no audio stream for job {job_id!r}", code="job_stream_unknown", job_id=job_id)
        if stream.released:
            raise NotFoundError(f"job {job_id!r} finished long ago; its audio stream has been released",
                                code="job_stream_released", job_id=job_id)
        return ClosingStreamingResponse(_wav_stream(job_id, stream), media_type="audio/wav",
                                 headers={"Cache-Control": "no-store", "X-Cosyedge-Job-Id": job_id})

    @router.delete("/jobs/{job_id}", responses=errors, tags=["jobs"])
    async def cancel_job(job_id: str) -> dict[str, Any]:
        """Cancel a waiting job at once, or a running one between two sentences."""
        job = service.job(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r}", code="job_unknown", job_id=job_id)
        return {"job_id": job_id, "cancelled": service.cancel(job_id), "state": job.state.value}

    return router


def _job_info(service: Service, job: Any) -> dict[str, Any]:
    info = {"job_id": job.id, "state": job.state.value, "phase": job.phase,
            "position": service.position(job),
            "progress": {"done": job.done_steps, "total": job.total_steps}}
    if code_of(job.phase) == "voice_preparing":  # a new voice's encoding, step by step
        params = job.phase.params
        info["voice"] = {key: params[key] for key in ("step", "total", "stage", "seconds_left")}
    return info


JSON_ADVICE = "send a JSON object with the header Content-Type: application/json"


def _body_problem(err: dict[str, Any], content_type: str) -> str | None:
    """The message for an error about the body as a whole (not one field), or None."""
    kind, loc = err.get("type"), tuple(err.get("loc", ()))
    if kind == "json_invalid":
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        reason = (err.get("ctx") or {}).get("error")
        return f"the body is invalid JSON{where}" + (f" ({reason})" if reason else "")
    if loc != ("body",):
        return None
    if kind == "missing":
        return f"the request has no body: {JSON_ADVICE}"
    value = err.get("input")
    if isinstance(value, (bytes, bytearray)):  # FastAPI only parses JSON when the header says JSON
        sent = f"Content-Type: {content_type}" if content_type else "no Content-Type header"
        return f"the body was not read as JSON because the request has {sent}: {JSON_ADVICE}"
    if kind in ("model_attributes_type", "dict_type", "model_type"):
        what = {list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
            type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)
        example = '{"text": "..."} ("input" on /v1/audio/speech)'
        return f"the body is {what} in JSON, not an object: {JSON_ADVICE}, e.g. {example}"
    return None


def _validation_message(exc: RequestValidationError, content_type: str = "") -> str:
    """One line naming every problem; body-level problems (not JSON, wrong header, not an object)
    in words a curl user can act on instead of pydantic's."""
    parts = []
    for err in exc.errors():
        problem = _body_problem(err, content_type)
        if problem is None:
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            problem = f"{loc}: {err.get('msg', 'invalid')}"
        parts.append(problem)
    return "; ".join(dict.fromkeys(parts)) or "invalid request"


async def _unparsed_body(request: Request) -> str:
    """Why FastAPI could not parse a body it took for JSON (its own words name nothing): most often
    text that is not UTF-8 (a Latin-1 or GBK editor)."""
    try:
        body = await request.body()
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (f"the body is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at position {exc.start}): "
                f"{JSON_ADVICE}, encoded as UTF-8")
    except Exception:  # the body is gone (already streamed): say what we know
        pass
    return f"the body could not be parsed: {JSON_ADVICE}"


def _is_form(request: Request) -> bool:
    """Whether the body is a form: only then does Starlette parse it itself (and name what is wrong,
    a missing multipart boundary say); FastAPI's 400 for any other body names nothing."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return content_type in ("multipart/form-data", "application/x-www-form-urlencoded")


def install_error_handlers(app: FastAPI) -> None:
    """Map the exception tree, validation and routing errors to the one JSON error shape."""

    @app.exception_handler(CosyedgeError)
    async def on_cosyedge_error(_: Request, exc: CosyedgeError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, BusyError) else None
        if exc.code == "voice_library_full":  # the teacher's own bound, not a fault of the box
            logger.warning("%s: %s", exc.code, exc.message)
        elif exc.http_status >= 500:
            logger.error("%s: %s", exc.kind, exc.message)
        return error_response(exc.http_status, exc.kind, exc.message, headers, exc.code)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        content_type = request.headers.get("content-type", "")
        return error_response(400, "invalid_request", _validation_message(exc, content_type))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Decided by status and request, never by Starlette's wording: our routes raise CosyedgeError,
        # so an HTTPException 404 or 405 is the router's.
        if exc.status_code == 404:
            return _no_route(request.method, request.url.path)
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            return _wrong_method(request.method, request.url.path, allowed.split(", ") if allowed else [])
        if exc.status_code == 400 and not _is_form(request):  # a form's 400 is its parser's, kept
            return error_response(400, "invalid_request", await _unparsed_body(request))
        kind = "payload_too_large" if exc.status_code == 413 else "http_error"
        return error_response(exc.status_code, kind, str(exc.detail), exc.headers)


#: Listed in the 404 for an unknown path (the page itself is at "/").
REST_ROUTES = ("POST /tts", "POST /v1/audio/speech", "GET /health", "GET /voices", "GET /jobs",
               "GET /jobs/{id}", "GET /jobs/{id}/audio", "DELETE /jobs/{id}", "GET /v1/models",
               "GET /v1/audio/models", "GET /v1/audio/voices", "POST /v1/audio/voices",
               "DELETE /v1/audio/voices/{id}")


def _no_route(method: str, path: str) -> JSONResponse:
    return error_response(404, "not_found", f"no route {method} {path}; the REST routes are "
                          f"{', '.join(REST_ROUTES)} (the page is at /)")


def _wrong_method(method: str, path: str, allowed: list[str]) -> JSONResponse:
    verbs = " or ".join(allowed) or "another method"
    return error_response(405, "method_not_allowed", f"{method} is not allowed on {path}; use {verbs}",
                          {"Allow": ", ".join(allowed)})


class RouteErrorMiddleware:
    """The REST error shape for requests no route takes, on an app whose "/" is Gradio's.

    The page is mounted at "/", so a wrong method on a REST path (GET /tts) falls through to the
    page's router and comes back a bare 404. Here a path that a REST route matches, asked with a
    method none of them allows, is answered 405 with ``Allow``; and a bare ``{"detail":"Not Found"}``
    404 from any router is rewritten to ``{"error": {...}}``. Everything else, the page's routes
    included, passes through untouched.
    """

    NOT_FOUND_BODY = b'{"detail":"Not Found"}'

    def __init__(self, app: Any, routes: list[APIRoute]) -> None:
        self.app = app
        self.routes = routes

    def allowed_methods(self, path: str) -> list[str] | None:
        """Methods the REST routes allow on ``path``; None when no REST route has that path."""
        methods = [m for r in self.routes if r.path_regex.match(path) for m in sorted(r.methods or ())]
        return list(dict.fromkeys(methods)) if methods else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope.get("path", "")
        allowed = self.allowed_methods(path)
        if allowed is not None and method not in allowed:
            await _wrong_method(method, path, allowed)(scope, receive, send)
            return
        held: list[dict] = []

        async def rewriting_send(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] == 404:
                held.append(message)
                return
            if held and message["type"] == "http.response.body":
                held.append(message)
                if message.get("more_body"):
                    return
                body = b"".join(m.get("body", b"") for m in held[1:])
                if body == self.NOT_FOUND_BODY:
                    await _no_route(method, path)(scope, receive, send)
                else:
                    for kept in held:
                        await send(kept)
                held.clear()
                return
            await send(message)

        await self.app(scope, receive, rewriting_send)


class BodyLimitMiddleware:
    """Refuse request bodies larger than the upload limit (base64 inflated), on every route.

    A declared Content-Length over the limit is answered 413 before any of the body is read; a
    body without one (chunked) is counted as it arrives and stopped with 413 once over the limit.
    Gradio's upload route is covered too (its own check only runs while it reads the body).
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self, size: str | None = None) -> PayloadTooLargeError:
        limit = f"{self.max_bytes / 1e6:.1f} MB"
        if size is None:
            return PayloadTooLargeError(f"request body is larger than the limit of {limit}",
                                        code="request_body_over_limit", limit=limit)
        return PayloadTooLargeError(f"request body is {size}; the limit is {limit}",
                                    code="request_body_too_large", size=size, limit=limit)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            exc = self._too_large(f"{int(length) / 1e6:.1f} MB")
            await error_response(exc.http_status, exc.kind, exc.message, code=exc.code)(scope, receive, send)
            return
        received = 0

        async def counted_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI turns other exceptions raised while reading a body into a 400.
                    raise StarletteHTTPException(413, self._too_large().message)
            return message

        await self.app(scope, counted_receive, send)


class PartialFileGuard:
    """Never serve a file whose name marks it as being written (``.tmp-*``, see write_wav_atomic)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            name = unquote(scope.get("path", "")).rsplit("/", 1)[-1]
            if name.startswith(TEMP_PREFIX):
                await error_response(404, "not_found", "no such file")(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_api(service: Service) -> FastAPI:
    """The FastAPI app with REST routes; app.py mounts the Gradio page on it."""
    app = FastAPI(title="cosyedge", version=__version__,
                  description="Offline text to speech: seed-compatible /tts and OpenAI-style speech.",
                  docs_url=None, redoc_url=None)  # Swagger/ReDoc pages load from a CDN: offline, no
    install_error_handlers(app)
    router = build_router(service)
    router.include_router(lesson_router(service))  # POST /lessons, GET /lessons/{id}/audio|zip|captions
    router.include_router(pronunciation_router(service))  # /pronunciations: list, add, delete, import, export
    router.include_router(mode_check_router(service, ERROR_RESPONSES))  # /models/{id}/check
    router.include_router(voice_router(service, ERROR_RESPONSES))  # /voices/library, {id}/rename|export, import
    routers = (router, build_openai_router(service, ERROR_RESPONSES))
    for router in routers:
        app.include_router(router)
    app.add_middleware(RouteErrorMiddleware,
                       routes=[r for router in routers for r in router.routes if isinstance(r, APIRoute)])
    limit = int(service.max_upload_mb * 1024 * 1024 * 4 / 3) + 1024 * 1024
    app.add_middleware(BodyLimitMiddleware, max_bytes=limit)
    app.add_middleware(PartialFileGuard)
    return app
