"""The OpenAI-style listing and voice-library routes, and how ``/v1/audio/speech`` reads its
``model`` and ``voice`` fields.

* ``GET /v1/models``: OpenAI's list shape; the loaded model plus ``tts-1`` and ``tts-1-hd``, which
  mean the loaded model (there is one model per box).
* ``GET /v1/audio/models`` and ``GET /v1/audio/voices``: the shapes Open WebUI reads for a custom
  base URL (``{"models": [{"id"}]}``, ``{"voices": [{"id", "name"}]}``), each also under ``data``.
* ``POST /v1/audio/voices``: what the official client's ``audio.voices.create(name=...,
  audio_sample=..., consent=...)`` sends (multipart), plus an optional ``transcript``; through the
  service's consent check (:mod:`cosyedge.voices.consent`). ``DELETE /v1/audio/voices/{id}``.

A ``voice`` names, in this order: a preset, a saved voice id, an OpenAI voice name (mapped to the
nearest preset); ``{"id": ...}`` (what the client sends for a custom voice) is read the same way.
Errors keep the app's one shape, which is OpenAI's (``error.type``, ``code``, ``message``, ``param``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, File, Form, UploadFile
from pydantic import BaseModel, ConfigDict

from cosyedge.errors import ParameterError
from cosyedge.service.facade import Service

logger = logging.getLogger(__name__)

#: OpenAI's model names that clients send by default; both mean the loaded model.
OPENAI_MODEL_ALIASES = ("tts-1", "tts-1-hd")
#: OpenAI's voice names, for clients that send their default ("alloy"): the nearest preset by the
#: voice's kind. The preset used is in the answer's X-Cosyedge-Report header; docs/web.md lists them.
OPENAI_VOICES = {"alloy": "female_1", "nova": "female_2", "shimmer": "female_1", "coral": "female_2",
                 "sage": "female_1", "echo": "male_2", "onyx": "male_1", "ash": "male_1",
                 "ballad": "male_2", "fable": "male_2", "verse": "male_1", "marin": "female_2",
                 "cedar": "male_1"}


class VoiceRef(BaseModel):
    """``{"id": ...}``: how the official client names a custom voice."""

    model_config = ConfigDict(extra="ignore")

    id: str


def loaded_model_names(service: Service) -> list[str]:
    """The names that mean the loaded model: its folder under models/, the engine's model id and the
    engine's name (``kokoro``, ``cosyvoice2``: what clients configured by engine send)."""
    names = [service.settings.model]
    for name in (service.holder.model_id, service.model_engine_name()):
        if name and name not in names:
            names.append(name)
    return names


def check_model(service: Service, model: str) -> None:
    """A 400 naming the loaded model unless ``model`` is it or one of OpenAI's aliases for it."""
    names = loaded_model_names(service)
    if model in OPENAI_MODEL_ALIASES or model in names:
        return
    raise ParameterError(f"model {model!r} is not loaded; this box serves {names[0]!r} (also accepted: "
                         f"{', '.join([*names[1:], *OPENAI_MODEL_ALIASES])})", code="model_not_loaded",
                         model=model, loaded=names[0])


def voice_fields(service: Service, voice: str | VoiceRef) -> dict[str, str | None]:
    """``speaker`` / ``voice_id`` for a TTSRequest: preset first, then saved id, then OpenAI's name.
    A name that is none of them stays a preset name, so the service's 404 lists the choices."""
    value = (voice.id if isinstance(voice, VoiceRef) else voice).strip()
    presets = {p.lower(): p for p in service.presets()}
    if value.lower() in presets:
        return {"speaker": presets[value.lower()], "voice_id": None}
    if value in {v.id for v in service.library.list()}:
        return {"speaker": None, "voice_id": value}
    return {"speaker": OPENAI_VOICES.get(value.lower(), value), "voice_id": None}


def _model_entries(service: Service) -> list[dict[str, Any]]:
    loaded = loaded_model_names(service)[0]
    return [{"id": name, "object": "model", "created": 0, "owned_by": "cosyedge",
             "name": name if name == loaded else f"{name} (means {loaded})"}
            for name in (loaded, *OPENAI_MODEL_ALIASES)]


def _saved_name(service: Service, info: Any) -> str:
    """"NAME (saved)", and on an engine that cannot clone what it is spoken as (the closest built-in voice)."""
    label = service.saved_voice_label(info)
    return f"{info.name} (saved; {label})" if label else f"{info.name} (saved)"


def _voice_entries(service: Service) -> list[dict[str, Any]]:
    presets = [{"id": p, "name": p, "type": "preset"} for p in service.presets()]
    saved = [{"id": v.id, "name": _saved_name(service, v), "type": "saved", "created_at": int(v.created)}
             for v in service.library.list()]
    return presets + saved


def _voice_object(info: Any) -> dict[str, Any]:
    """OpenAI's ``Voice`` shape for a saved voice."""
    return {"id": info.id, "object": "audio.voice", "name": info.name, "type": "audio_sample",
            "created_at": int(info.created),
            "consent_given": info.consent.given_at if info.consent is not None else None}


def _consent_value(consent: str | None) -> bool | str | None:
    """The form's ``consent`` for the service's check: "true" is a yes, another word a reference
    (the official client sends a consent recording id), "false" / empty no consent."""
    if consent is None:
        return None
    word = consent.strip()
    if word.lower() in ("true", "yes", "1"):
        return True
    if word.lower() in ("false", "no", "0", ""):
        return None
    return word


def build_openai_router(service: Service, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    """The listing and voice routes, bound to one service (no globals)."""
    router = APIRouter(tags=["openai"])

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The loaded model and its OpenAI aliases, in OpenAI's list shape."""
        return {"object": "list", "data": _model_entries(service)}

    @router.get("/v1/audio/models")
    async def audio_models() -> dict[str, Any]:
        """The speech models, in the shape Open WebUI reads (``models``) and OpenAI's (``data``)."""
        entries = _model_entries(service)
        return {"object": "list", "models": entries, "data": entries}

    @router.get("/v1/audio/voices")
    async def audio_voices() -> dict[str, Any]:
        """Presets, then saved voices; ``voice`` in /v1/audio/speech takes any ``id`` here."""
        entries = await asyncio.to_thread(_voice_entries, service)
        return {"object": "list", "voices": entries, "data": entries}

    @router.post("/v1/audio/voices", responses=errors)
    async def create_voice(name: str = Form(...), audio_sample: UploadFile = File(...),
                           consent: str | None = Form(None), transcript: str | None = Form(None),
                           voice_type: str | None = Form(None, alias="type")) -> dict[str, Any]:
        """Save an uploaded recording as a voice (``consent``: "true" or a consent id)."""
        if voice_type not in (None, "", "audio_sample"):
            raise ParameterError(f"voice type {voice_type!r} is not supported: only audio_sample (a "
                                 "recording)", code="voice_type_unsupported", type=voice_type)
        data = await audio_sample.read()
        info = await asyncio.to_thread(service.save_voice, name, data, transcript,
                                       consent=_consent_value(consent))
        logger.info("saved voice %s from /v1/audio/voices", info.id)
        return _voice_object(info)

    @router.delete("/v1/audio/voices/{voice_id}", responses=errors)
    async def delete_voice(voice_id: str) -> dict[str, Any]:
        """Delete a saved voice (a preset is no saved voice: 404)."""
        await asyncio.to_thread(service.library.delete, voice_id)
        return {"id": voice_id, "object": "audio.voice.deleted", "deleted": True}

    return router
