"""A Wyoming TTS server inside the app's process: how Home Assistant speaks through a TTS box.

It runs on its own thread and event loop next to the web server and submits every request to the
same :class:`~cosyedge.service.facade.Service`, so the one job queue (two jobs at a time), the thermal
governor and the one loaded model hold for Wyoming clients too.

* ``describe`` -> ``info``: one TTS program whose voices are the model's presets, then the saved
  voices (by id), each with the languages the engine reads.
* ``synthesize`` -> ``audio-start``, ``audio-chunk``s as each piece is made, ``audio-stop``.
* ``synthesize-start`` / ``-chunk`` / ``-stop`` (streamed text, e.g. from a chat model): each
  complete sentence is spoken as it arrives (its own start/chunks/stop), then ``synthesize-stopped``;
  the plain ``synthesize`` a client also sends inside such a stream is ignored.
* A refusal (busy, text too long, unknown voice, ...) is an ``error`` event with the error's code.
* A malformed or out-of-order event (:mod:`cosyedge.web.wyoming_events`) is an ``error`` event with
  its code and one log line, never a traceback: the connection goes on when the framing is intact
  (an unknown event, a field of the wrong type, a stream chunk or stop without its start) and is
  closed after the error when it is broken (bad header, bad lengths, bad UTF-8, a cut-off event).
* ``ping`` -> ``pong``.
* A client that disconnects cancels its jobs, waiting or running.

Wyoming has no authentication: the server binds 127.0.0.1 unless told otherwise, and when it listens
on the network it answers only the client addresses in its allow-list. It never announces itself
(no zeroconf/mDNS).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import re
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.ping import Ping, Pong
from wyoming.server import AsyncEventHandler, AsyncTcpServer
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from cosyedge import __version__
from cosyedge.audio import to_pcm16
from cosyedge.errors import CosyedgeError, ProtocolError
from cosyedge.service.jobs import Job
from cosyedge.service.facade import Service
from cosyedge.service.requests import TTSRequest
from cosyedge.web.wyoming_events import BROKEN_FRAMING, read_client_event, text_field, voice_name

logger = logging.getLogger(__name__)

#: Samples per ``audio-chunk`` (~85 ms at 24 kHz): small enough for a player to start at once.
SAMPLES_PER_CHUNK = 2048
_ATTRIBUTION = Attribution(name="cosyedge", url="")  # nothing to link to: the box is offline
#: Where a streamed text may be cut: after a sentence end and a space, or after a CJK sentence end.
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？])")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class WyomingSettings:
    """Where the Wyoming server listens and whom it answers."""

    port: int
    host: str = "127.0.0.1"
    #: Client addresses or networks answered besides loopback (needed when ``host`` is not loopback).
    allow: tuple[str, ...] = ()

    def networks(self) -> tuple[Network, ...]:
        return tuple(ipaddress.ip_network(a, strict=False) for a in self.allow)


def allowed(peer: str, networks: tuple[Network, ...]) -> bool:
    """Loopback always; otherwise only an address inside one of ``networks``."""
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or any(address in net for net in networks)


def _saved_description(service: Service, info: Any) -> str:
    """"saved voice NAME", and on an engine that cannot clone what it is spoken as (the closest
    built-in voice)."""
    label = service.saved_voice_label(info)
    return f"saved voice {info.name}" + (f" ({label})" if label else "")


def describe_info(service: Service) -> Info:
    """The ``info`` event: presets then saved voices, each with the engine's languages."""
    languages = [lang for lang in service.languages() if lang != "auto"]
    model = service.holder.model_id or service.settings.model
    voices = [TtsVoice(name=p, description=f"preset {p} ({model})", attribution=_ATTRIBUTION,
                       installed=True, version=None, languages=languages)
              for p in service.presets()]
    voices += [TtsVoice(name=v.id, description=_saved_description(service, v), attribution=_ATTRIBUTION,
                        installed=True, version=None, languages=languages)
               for v in service.library.list()]
    program = TtsProgram(name="cosyedge", description=f"cosyedge offline speech ({model})",
                         attribution=_ATTRIBUTION, installed=True, version=__version__, voices=voices,
                         supports_synthesize_streaming=True)
    return Info(tts=[program])


def voice_fields(service: Service, name: str | None) -> dict[str, str | None]:
    """A Wyoming voice name as ``speaker`` / ``voice_id``: a preset first, then a saved voice id;
    anything else stays a preset name so the service refuses it, listing the choices."""
    if not name:
        return {"speaker": None, "voice_id": None}
    presets = {p.lower(): p for p in service.presets()}
    if name.lower() in presets:
        return {"speaker": presets[name.lower()], "voice_id": None}
    if name in {v.id for v in service.library.list()}:
        return {"speaker": None, "voice_id": name}
    return {"speaker": name, "voice_id": None}


def split_sentences(text: str) -> tuple[list[str], str]:
    """Complete sentences of a streamed text, and the rest still to come."""
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)]
    if not cuts:
        return [], text
    done, rest = text[:cuts[-1]], text[cuts[-1]:]
    return ([done.strip()] if done.strip() else []), rest


class SpeechHandler(AsyncEventHandler):
    """One Wyoming connection. Speech runs in tasks chained one after another, so the connection
    keeps reading while it speaks: a client that goes away is seen at once and its jobs end."""

    def __init__(self, service: Service, networks: tuple[Network, ...], reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.service = service
        self.networks = networks
        peer = writer.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else "?"
        self.owner = f"wyoming:{self.peer}:{id(self)}"
        self._tail: asyncio.Task[None] | None = None  # the last speech task queued on this connection
        self._tasks: set[asyncio.Task[None]] = set()  # every speech task not yet done
        self._streamed: dict[str, Any] | None = None  # voice and text of a synthesize-start stream

    async def run(self) -> None:
        """Read events until the client leaves, an event breaks the framing, or the server stops.

        Replaces the base class's loop, whose reader ends the connection without a word on some
        malformed events and lets others raise out of this task."""
        if not allowed(self.peer, self.networks):
            logger.warning("wyoming: refused client %s (not in the allow-list)", self.peer)
            self.writer.close()
            return
        self._is_running = True
        try:
            while self._is_running:
                try:
                    event = await read_client_event(self.reader)
                    if event is None:
                        break
                    await self.handle_event(event)
                except ProtocolError as exc:
                    await self._bad_event(exc)
                    if exc.code in BROKEN_FRAMING:
                        break
        except (ConnectionError, OSError) as exc:  # the client went away while we answered
            logger.info("wyoming: client %s: connection lost (%s)", self.peer, exc)
        finally:
            await self.disconnect()
            self.writer.close()

    async def handle_event(self, event: Event) -> bool:
        """Answer one well-framed event; a bad field or order raises :class:`ProtocolError`."""
        if Describe.is_type(event.type):
            info = await asyncio.to_thread(describe_info, self.service)
            await self.write_event(info.event())
        elif Ping.is_type(event.type):
            await self.write_event(Pong(text=text_field(event, required=False) or None).event())
        elif Synthesize.is_type(event.type):
            text, voice = text_field(event), voice_name(event)
            if self._streamed is None:  # inside a stream it only repeats the streamed text
                self._chain(functools.partial(self._speak, " ".join(text.split()), voice))
        elif SynthesizeStart.is_type(event.type):
            voice = voice_name(event)
            if self._streamed is not None:
                raise ProtocolError("synthesize-start: a text stream is already open on this "
                                    "connection; end it with synthesize-stop first",
                                    code="stream_already_started")
            self._streamed = {"voice": voice, "text": ""}
        elif SynthesizeChunk.is_type(event.type):
            text = text_field(event)
            if self._streamed is None:
                raise ProtocolError("synthesize-chunk without synthesize-start", code="stream_not_started",
                                    event=event.type)
            self._streamed["text"] += text
            sentences, self._streamed["text"] = split_sentences(self._streamed["text"])
            for sentence in sentences:
                self._chain(functools.partial(self._speak, sentence, self._streamed["voice"]))
        elif SynthesizeStop.is_type(event.type):
            if self._streamed is None:
                raise ProtocolError("synthesize-stop without synthesize-start", code="stream_not_started",
                                    event=event.type)
            rest, voice = self._streamed["text"].strip(), self._streamed["voice"]
            self._streamed = None
            if rest:
                self._chain(functools.partial(self._speak, rest, voice))
            self._chain(functools.partial(self.write_event, SynthesizeStopped().event()))
        else:
            raise ProtocolError(f"this TTS server does not take {event.type[:60]!r} events (it takes "
                                "describe, ping, synthesize and synthesize-start/-chunk/-stop)",
                                code="event_unknown", event=event.type[:60])
        return True

    async def _bad_event(self, exc: ProtocolError) -> None:
        """One log line and an ``error`` event for a client's malformed or out-of-order event: after
        the answers still being sent, unless the connection is about to close."""
        closing = exc.code in BROKEN_FRAMING
        logger.warning("wyoming: client %s sent a bad event (%s: %s)%s", self.peer, exc.code, exc.message,
                       "; closing the connection" if closing else "")
        error = Error(text=exc.message, code=exc.code).event()
        if not closing and self._tail is not None and not self._tail.done():
            self._chain(functools.partial(self.write_event, error))
            return
        try:
            await self.write_event(error)
        except (ConnectionError, OSError):
            pass  # it is closing anyway

    def _chain(self, answer: Callable[[], Awaitable[None]]) -> None:
        """Send ``answer()`` (speech, the end of a text stream, an error) after what is queued, so a
        client reads its answers in the order it asked."""
        previous = self._tail

        async def after() -> None:
            if previous is not None:
                await asyncio.wait({previous})  # its outcome is its own; only its end matters here
            try:
                await answer()
            except (ConnectionError, OSError) as exc:  # the client went away mid-answer
                logger.info("wyoming: client %s: connection lost (%s)", self.peer, exc)

        task = asyncio.ensure_future(after())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._tail = task

    async def _speak(self, text: str, voice: str | None) -> None:
        """One job: audio-start, the chunks as they are made, audio-stop; or an error event."""
        request = TTSRequest(text=text, **voice_fields(self.service, voice))
        try:
            job = await asyncio.to_thread(self.service.submit, request, self.owner, None, True)
        except CosyedgeError as exc:
            await self._refuse(exc)
            return
        answered = False  # audio-stop sent: the job's tail (result, history) may still run
        try:
            await self._send_audio(job)
            answered = True
        except CosyedgeError as exc:
            await self._refuse(exc)
        finally:
            if not answered and not job.finished:
                logger.info("wyoming: client %s went away; cancelling job %s", self.peer, job.id)
                self.service.cancel(job.id)

    async def _send_audio(self, job: Job) -> None:
        stream = job.stream
        assert stream is not None  # submitted with stream=True
        pieces = stream.pieces_async()
        started = False
        try:
            async for piece in pieces:
                info = stream.info
                assert info is not None  # the worker starts the stream before its first piece
                if not started:
                    await self.write_event(AudioStart(rate=info.sample_rate, width=2, channels=1).event())
                    started = True
                pcm = to_pcm16(piece).astype("<i2").tobytes()
                step = SAMPLES_PER_CHUNK * 2
                for offset in range(0, len(pcm), step):
                    await self.write_event(AudioChunk(rate=info.sample_rate, width=2, channels=1,
                                                      audio=pcm[offset:offset + step]).event())
        finally:
            await pieces.aclose()
        if not started:  # nothing to say (the job made no audio): still a complete answer
            rate = stream.info.sample_rate if stream.info is not None else 24000
            await self.write_event(AudioStart(rate=rate, width=2, channels=1).event())
        await self.write_event(AudioStop().event())

    async def _refuse(self, exc: CosyedgeError) -> None:
        logger.info("wyoming: %s refused: %s: %s", self.peer, exc.code, exc.message)
        await self.write_event(Error(text=exc.message, code=exc.code).event())

    async def disconnect(self) -> None:
        """The client is gone: its queued speech stops and its jobs are cancelled."""
        for task in list(self._tasks):
            task.cancel()
        cancelled = self.service.cancel_owner(self.owner)
        if cancelled:
            logger.info("wyoming: client %s disconnected; cancelled %d job(s)", self.peer, cancelled)


class WyomingServer:
    """The Wyoming TCP server on a thread of its own; ``start()`` returns once it listens."""

    def __init__(self, service: Service, settings: WyomingSettings) -> None:
        self.service = service
        self.settings = settings
        self._networks = settings.networks()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: AsyncTcpServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "WyomingServer":
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._listen())
            except BaseException as exc:  # e.g. the port is taken: start() raises it
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name="cosyedge-wyoming", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        logger.info("wyoming TTS server on tcp://%s:%d%s", self.settings.host, self.settings.port,
                    f" (clients: loopback, {', '.join(self.settings.allow)})" if self.settings.allow
                    else " (loopback clients only)")
        return self

    async def _listen(self) -> None:
        self._server = AsyncTcpServer(self.settings.host, self.settings.port)
        await self._server.start(lambda reader, writer: SpeechHandler(self.service, self._networks,
                                                                      reader, writer))

    def stop(self) -> None:
        """Close the listener and every connection (their jobs are cancelled), then the thread."""
        loop, server = self._loop, self._server
        if loop is None or server is None or not loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
