"""The Wyoming TTS server (cosyedge/web/wyoming_server.py) with the ``wyoming`` package's own client
classes against a live server on 127.0.0.1, over the fake engine."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import sys
import threading
import time

import numpy as np
import pytest
import soundfile as sf
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

from cosyedge.web.wyoming_server import WyomingServer, WyomingSettings, allowed, split_sentences
from tests.helpers.job_tail import slow_job_end
from tests.helpers.live_server import free_port


@pytest.fixture
def wyoming(make_service):
    """Start a Wyoming server over a fresh fake-engine service; ``(server, service)``."""
    servers: list[WyomingServer] = []

    def start(service=None, **settings):
        service = service or make_service()
        server = WyomingServer(service, WyomingSettings(port=free_port(), **settings)).start()
        servers.append(server)
        return server, service

    yield start
    for server in servers:
        server.stop()


def client(server: WyomingServer) -> AsyncTcpClient:
    return AsyncTcpClient("127.0.0.1", server.settings.port, connect_timeout=5, read_timeout=30)


async def speak(server: WyomingServer, text: str, voice: str | None = None) -> list:
    """Send one synthesize; the events up to audio-stop or error."""
    async with client(server) as c:
        await c.write_event(Synthesize(text=text, voice=SynthesizeVoice(name=voice) if voice else None)
                            .event())
        return await read_answer(c)


async def read_answer(c: AsyncTcpClient, until=(AudioStop, Error)) -> list:
    events = []
    while True:
        event = await c.read_event()
        assert event is not None, f"the server closed the connection after {events}"
        for kind in (AudioStart, AudioChunk, AudioStop, Error, Info):
            if kind.is_type(event.type):
                events.append(kind.from_event(event))
        if any(isinstance(events[-1], kind) for kind in until) if events else False:
            return events


def test_describe_lists_presets_and_saved_voices_with_languages(wyoming):
    server, service = wyoming()
    wav = io.BytesIO()
    sf.write(wav, 0.2 * np.sin(2 * np.pi * 200 * np.arange(64000) / 16000), 16000, format="WAV")
    service.save_voice("Ms Lee", wav.getvalue(), "hello", consent=True)

    async def describe():
        async with client(server) as c:
            await c.write_event(Describe().event())
            return Info.from_event(await c.read_event())

    info = asyncio.run(describe())
    (program,) = info.tts
    assert program.name == "cosyedge" and program.supports_synthesize_streaming
    assert [v.name for v in program.voices] == ["female_1", "female_2", "male_1", "male_2", "child", "ms-lee"]
    assert all(v.languages == ["zh", "en", "ja"] for v in program.voices)
    assert "zeroconf" not in sys.modules  # never announced


def test_synthesize_a_preset_and_a_saved_voice(wyoming):
    server, service = wyoming()
    events = asyncio.run(speak(server, "Hello there. Second sentence!", "male_1"))
    assert isinstance(events[0], AudioStart) and isinstance(events[-1], AudioStop)
    chunks = [e for e in events if isinstance(e, AudioChunk)]
    assert events[0].rate == 24000 and events[0].width == 2 and events[0].channels == 1
    from cosyedge.audio import to_pcm16
    from cosyedge.service.requests import TTSRequest

    direct = service.submit(TTSRequest(text="Hello there. Second sentence!", speaker="male_1"))
    assert direct.wait(10)
    expected = to_pcm16(direct.outcome().audio).astype("<i2").tobytes()
    assert b"".join(c.audio for c in chunks) == expected  # what the service made, all of it, once
    assert max(len(c.audio) for c in chunks) <= 2 * 2048
    engine = service.holder._engine
    assert engine.calls[-1][1] == "male_1"
    wav = io.BytesIO()
    sf.write(wav, 0.2 * np.sin(2 * np.pi * 200 * np.arange(64000) / 16000), 16000, format="WAV")
    saved = service.save_voice("Ms Lee", wav.getvalue(), "hello", consent=True)
    events = asyncio.run(speak(server, "Good morning.", saved.id))
    assert isinstance(events[-1], AudioStop) and any(isinstance(e, AudioChunk) for e in events)
    assert not isinstance(engine.calls[-1][1], str)  # an encoded prompt, not a preset


def test_a_bad_voice_and_over_long_text_are_error_events_with_codes(wyoming):
    server, service = wyoming()
    (error,) = asyncio.run(speak(server, "Hello.", "robot"))
    assert isinstance(error, Error) and error.code == "preset_unknown" and "female_1" in error.text
    (error,) = asyncio.run(speak(server, "x" * (service.settings.max_text_chars + 1)))
    assert error.code == "text_too_long"
    assert isinstance(asyncio.run(speak(server, "Still here."))[-1], AudioStop)  # the server lives on


def test_a_busy_box_answers_with_an_error_event(wyoming, make_service, web_settings, fake_factory):
    from cosyedge.service.requests import TTSRequest

    fake_factory.engine_kwargs["delay"] = 0.3
    service = make_service(dataclasses.replace(web_settings, concurrency=1, queue_size=0))
    server, _ = wyoming(service)
    running = service.submit(TTSRequest(text="One. Two. Three. Four."))
    try:
        (error,) = asyncio.run(speak(server, "Hello."))
        assert isinstance(error, Error) and error.code == "queue_full" and "busy" in error.text.lower()
    finally:
        service.cancel(running.id)


def test_a_client_that_disconnects_mid_stream_ends_its_job(wyoming, make_service, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.3
    server, service = wyoming(make_service())
    text = " ".join(f"Sentence number {i}." for i in range(20))  # ~6 s of work

    async def leave_after_first_chunk():
        async with client(server) as c:
            await c.write_event(Synthesize(text=text).event())
            while not AudioChunk.is_type((await c.read_event()).type):
                pass

    asyncio.run(leave_after_first_chunk())
    deadline = time.monotonic() + 5
    while service.queue.stats().running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.queue.stats().running == 0, "the job went on after its client left"
    assert fake_factory.engine.sentences_done < 10


def test_a_client_that_leaves_while_its_job_waits_takes_it_out_of_the_queue(wyoming, make_service,
                                                                            fake_factory):
    """Nothing is written to a waiting client, so only reading the connection sees it go."""
    from cosyedge.service.requests import TTSRequest

    fake_factory.engine_kwargs["delay"] = 0.3
    server, service = wyoming(make_service())
    busy = [service.submit(TTSRequest(text="One. Two. Three. Four. Five. Six.")) for _ in range(2)]
    deadline = time.monotonic() + 10
    while service.queue.stats().running < 2 and time.monotonic() < deadline:  # both have started
        time.sleep(0.02)

    async def ask_and_leave():
        async with client(server) as c:
            await c.write_event(Synthesize(text="Waiting in line.").event())
            deadline = time.monotonic() + 5
            while service.queue.stats().waiting == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert service.queue.stats().waiting == 1

    asyncio.run(ask_and_leave())
    deadline = time.monotonic() + 1
    while service.queue.stats().waiting and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service.queue.stats().waiting == 0 and not any(job.finished for job in busy)
    for job in busy:
        service.cancel(job.id)


def test_three_clients_at_once_never_more_than_two_running(wyoming, make_service, fake_factory):
    fake_factory.engine_kwargs["delay"] = 0.2
    server, service = wyoming(make_service())
    running: list[int] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            running.append(service.queue.stats().running)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()

    async def three():
        return await asyncio.gather(*(speak(server, "One. Two. Three.", voice)
                                      for voice in ("female_1", "male_1", "child")))

    try:
        answers = asyncio.run(three())
    finally:
        stop.set()
        watcher.join()
    assert all(isinstance(a[-1], AudioStop) for a in answers), answers
    assert max(running) == 2 and fake_factory.engine.peak == 2


def test_streamed_text_is_spoken_sentence_by_sentence(wyoming):
    server, service = wyoming()

    async def stream():
        async with client(server) as c:
            await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name="child")).event())
            for part in ("Hello the", "re. How are", " you? Fine"):
                await c.write_event(SynthesizeChunk(text=part).event())
            await c.write_event(Synthesize(text="Hello there. How are you? Fine").event())  # ignored
            await c.write_event(SynthesizeStop().event())
            kinds = []
            while not kinds or kinds[-1] != "synthesize-stopped":
                kinds.append((await c.read_event()).type)
            return kinds

    kinds = asyncio.run(stream())
    assert kinds.count("audio-start") == kinds.count("audio-stop") == 3  # one per sentence, none twice
    texts = [call[0] for call in service.holder._engine.calls]
    assert texts == ["Hello there.", "How are you?", "Fine"]  # each spoken once its end arrived


def test_the_allow_list_decides_who_is_answered():
    from ipaddress import ip_network

    nets = (ip_network("192.168.1.20"), ip_network("10.0.0.0/24"))
    assert allowed("127.0.0.1", ()) and allowed("::1", ()) and allowed("::ffff:127.0.0.1", ())
    assert allowed("192.168.1.20", nets) and allowed("10.0.0.7", nets)
    assert not allowed("192.168.1.21", nets) and not allowed("8.8.8.8", ()) and not allowed("?", nets)


def test_split_sentences_keeps_the_unfinished_rest():
    assert split_sentences("Hello. How") == (["Hello."], "How")
    assert split_sentences("你好。今天") == (["你好。"], "今天")
    assert split_sentences("no end yet") == ([], "no end yet")


def test_app_flags_keep_wyoming_on_loopback_unless_opened_with_an_allow_list(monkeypatch):
    from app import parse_args, wyoming_settings
    from cosyedge.config import SettingsError

    monkeypatch.delenv("COSYEDGE_WYOMING_PORT", raising=False)
    assert wyoming_settings(parse_args([])) is None  # off by default
    on = wyoming_settings(parse_args(["--wyoming-port", "10200"]))
    assert (on.host, on.port, on.allow) == ("127.0.0.1", 10200, ())
    with pytest.raises(SettingsError, match="--wyoming-allow"):
        wyoming_settings(parse_args(["--wyoming-port", "10200", "--wyoming-host", "0.0.0.0"]))
    with pytest.raises(SettingsError, match="not an IP"):
        wyoming_settings(parse_args(["--wyoming-port", "1", "--wyoming-allow", "ha.local"]))
    opened = wyoming_settings(parse_args(["--wyoming-port", "10200", "--wyoming-host", "0.0.0.0",
                                          "--wyoming-allow", "192.168.1.20, 10.0.0.0/24"]))
    assert opened.allow == ("192.168.1.20", "10.0.0.0/24")
    monkeypatch.setenv("COSYEDGE_WYOMING_PORT", "10300")
    assert wyoming_settings(parse_args([])).port == 10300


def test_a_client_outside_the_allow_list_gets_nothing(make_service):
    """The connection handler of a peer not in the allow-list closes at once, reading nothing (the
    test box has no second address to connect from)."""
    from cosyedge.web.wyoming_server import SpeechHandler

    class Writer:
        closed = False

        def get_extra_info(self, name):
            return ("192.168.5.5", 40000) if name == "peername" else None

        def close(self):
            self.closed = True

    async def connect():
        reader = asyncio.StreamReader()
        reader.feed_data(Describe().event().to_dict().__repr__().encode())  # never read
        writer = Writer()
        await SpeechHandler(make_service(), (), reader, writer).run()
        return writer, reader

    writer, reader = asyncio.run(connect())
    assert writer.closed and not reader.at_eof()


def test_wyoming_requests_take_the_servers_quality(wyoming, make_service, web_settings, fake_factory):
    """Wyoming has no field for it: a synthesize runs in the server's default mode (COSYEDGE_QUALITY)."""
    from cosyedge.service.requests import QUALITY_NAMES

    fake_factory.engine_kwargs["quality_modes"] = QUALITY_NAMES
    service = make_service(dataclasses.replace(web_settings, quality="live"))
    server, _ = wyoming(service)
    assert isinstance(asyncio.run(speak(server, "Hello there."))[-1], AudioStop)
    assert service.holder._engine.calls[-1][2].quality == "live"


def test_an_answer_sent_to_its_audio_stop_lets_the_job_finish(wyoming, monkeypatch, caplog):
    """audio-stop can leave before the job counts as finished: the client has not gone away, so the
    job must end done, not cancelled."""
    from cosyedge.service.jobs import JobState

    slowed = slow_job_end(monkeypatch)
    server, service = wyoming()
    submitted = []
    submit = service.submit
    monkeypatch.setattr(service, "submit", lambda *a, **k: submitted.append(submit(*a, **k)) or submitted[-1])
    with caplog.at_level(logging.INFO, logger="cosyedge.web.wyoming_server"):
        events = asyncio.run(speak(server, "Hello there. Second sentence!", "male_1"))
        assert isinstance(events[-1], AudioStop)
        (job,) = submitted
        assert job.wait(10)
    assert slowed == [job.id] and job.state is JobState.DONE, job.outcome()
    assert "went away" not in caplog.text
