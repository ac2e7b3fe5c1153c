"""The espeak-ng worker process: output, failures, restarts, and that the library stays out of our process."""

import os
import signal
import textwrap
from pathlib import Path

import pytest

from cosyedge.text import espeak as espeak_mod
from cosyedge.text.espeak import EspeakClient, EspeakUnavailable
from tests.helpers.waiting import wait_until


@pytest.fixture
def client():
    c = EspeakClient()
    yield c
    c.close()


def test_ipa_with_ties(client):
    assert client.ipa("Hello world") == "həlˈo^ʊ wˈɜːld"
    assert client.ipa("the church judge") == "ðə t^ʃˈɜːt^ʃ d^ʒˈʌd^ʒ"
    assert client.version and client.version.startswith("1.52")


def test_blank_text_does_not_reach_the_worker(client):
    assert client.ipa("   ") == ""


def test_unknown_voice_fails_softly_and_the_worker_survives(client, caplog):
    assert client.ipa("hello", voice="no-such-voice") is None
    assert "no voice" in caplog.text
    assert client.ipa("hello") == "həlˈo^ʊ"


def test_worker_is_restarted_after_a_crash(client):
    first = client.ipa("hello world")
    pid = client.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: client.worker_pid is None, what="the killed worker gone")
    assert client.ipa("hello world") == first == "həlˈo^ʊ wˈɜːld"
    assert client.worker_pid not in (None, pid)


def test_library_is_never_loaded_into_this_process(client):
    client.ipa("hello")
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("needs /proc (Linux)")
    assert "libespeak-ng" not in maps.read_text()


def _fake_worker(tmp_path, body):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    return script


def test_missing_library_raises_model_missing_with_install_hint(tmp_path, monkeypatch):
    script = _fake_worker(tmp_path, """
        import json, sys
        print(json.dumps({"fatal": "OSError: libespeak-ng.so: cannot open"}), flush=True)
    """)
    monkeypatch.setattr(espeak_mod, "WORKER", script)
    with pytest.raises(EspeakUnavailable, match="pip install espeakng-loader"):
        EspeakClient().ipa("hello")


def test_hanging_worker_times_out_and_is_replaced(tmp_path, monkeypatch):
    script = _fake_worker(tmp_path, """
        import json, sys, time
        print(json.dumps({"ready": True, "version": "fake"}), flush=True)
        for line in sys.stdin:
            time.sleep(60)
    """)
    monkeypatch.setattr(espeak_mod, "WORKER", script)
    c = EspeakClient(timeout_s=0.5)
    try:
        assert c.ipa("hello") is None
        assert c.worker_pid is None  # killed; the next call starts a fresh one
    finally:
        c.close()

