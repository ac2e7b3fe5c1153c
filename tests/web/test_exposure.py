"""Exposure rules: loopback by default, credentials on everything when set, body limits before the
body, no file under outputs/, prompts/, models/ or the code served except through the intended
routes, and a server that works with no network at all (a fresh network namespace).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from cosyedge.config import Settings, from_env
from tests.helpers import REPO
from tests.helpers.live_server import free_port

SECRET = b"SECRET-PROMPT-EMBEDDING"


@pytest.fixture
def ui_server(make_service, live_server, web_settings):
    """The whole app (REST + Gradio page) on the fake engine, with files planted where they live."""
    prompts = web_settings.prompts_path
    prompts.mkdir(exist_ok=True)
    (prompts / "teacher.json").write_bytes(SECRET)
    service = make_service()
    srv = live_server(service, with_ui=True)
    srv.service = service
    srv.settings = web_settings
    return srv


def raw_request(port: int, head: bytes, body: bytes = b"", wait: float = 5.0) -> tuple[float, bytes]:
    """Send bytes on a fresh socket; (seconds until the first answer, the whole answer).

    The answer is whole at its Content-Length, or else when the server closes the connection (a
    refused upload stays open until the server's keep-alive timeout: waiting for that added 5 s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        started = time.monotonic()
        sock.sendall(head + body)
        data = b""
        try:
            chunk = sock.recv(65536)
            took = time.monotonic() - started
            while chunk:
                data += chunk
                if _complete(data):
                    break
                chunk = sock.recv(65536)
        except socket.timeout:
            took = time.monotonic() - started
        return took, data


def _complete(answer: bytes) -> bool:
    """Whether ``answer`` holds its headers and the whole body they announce by Content-Length."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False


def test_default_bind_is_loopback():
    assert Settings().host == "127.0.0.1"
    assert from_env({}).host == "127.0.0.1"


@pytest.mark.slow
def test_app_listens_on_loopback_only(tmp_path):
    port = free_port()
    env = {"PATH": os.environ["PATH"], "COSYEDGE_OUTPUTS_DIR": str(tmp_path),
           "COSYEDGE_MODELS_DIR": str(tmp_path), "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        else:
            pytest.fail("app.py did not come up")
        listening = {c.laddr.ip for c in psutil.Process(proc.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN}
        assert listening == {"127.0.0.1"}, listening
    finally:
        proc.terminate()
        proc.wait(20)


UI_AND_REST = [("GET", "/"), ("GET", "/config"), ("GET", "/gradio_api/info"),
               ("GET", "/gradio_api/heartbeat/abc"), ("POST", "/gradio_api/upload"),
               ("POST", "/gradio_api/queue/join"), ("GET", "/gradio_api/queue/data?session_hash=x"),
               ("POST", "/gradio_api/call/preset"), ("GET", "/theme.css"),
               ("POST", "/tts"), ("POST", "/v1/audio/speech"), ("GET", "/health"), ("GET", "/voices"),
               ("GET", "/jobs"), ("DELETE", "/jobs/x"), ("GET", "/openapi.json"),
               ("GET", "/gradio_api/file=/etc/hostname")]


def test_the_live_players_stream_needs_the_credentials_too(make_service, live_server, web_settings):
    """The stream token is no password: GET /jobs/{id}/audio sits behind the same Basic auth."""
    from gradio_client import Client

    service = make_service(dataclasses.replace(web_settings, host="0.0.0.0", auth="teacher:s3cret"))
    server = live_server(service, with_ui=True)
    token = "Basic " + __import__("base64").b64encode(b"teacher:s3cret").decode()
    client = Client(server.url, headers={"Authorization": token}, verbose=False,
                    download_files=str(web_settings.root / "dl"), analytics_enabled=False)
    try:
        job = client.submit("female_1", "Hello.", 1.0, "auto", None, api_name="/preset")
        job.result()
        live = job.outputs()[0][-1]   # the first update: the live player's stream URL (the last output)
    finally:
        client.close()
    assert live.startswith("/jobs/") and "token=" in live
    assert httpx.get(server.url + live, timeout=30).status_code == 401
    r = httpx.get(server.url + live, auth=("teacher", "s3cret"), timeout=30)
    assert r.status_code == 200 and r.content[:4] == b"RIFF"


def test_lan_exposure_needs_credentials_on_ui_and_rest(make_service, live_server, web_settings):
    service = make_service(dataclasses.replace(web_settings, host="0.0.0.0", auth="teacher:s3cret"))
    server = live_server(service, with_ui=True)
    for method, path in UI_AND_REST:
        for auth in (None, ("teacher", "wrong"), ("pupil", "s3cret")):
            r = httpx.request(method, server.url + path, auth=auth, json={}, timeout=30)
            assert r.status_code == 401, (method, path, auth, r.status_code)
            assert r.headers["www-authenticate"].startswith("Basic")
    r = httpx.get(server.url + "/health", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert httpx.get(server.url + "/", auth=("teacher", "s3cret"), timeout=30).status_code == 200
    from gradio_client import Client

    token = "Basic " + __import__("base64").b64encode(b"teacher:s3cret").decode()
    client = Client(server.url, headers={"Authorization": token}, verbose=False,
                    download_files=str(web_settings.root / "dl"), analytics_enabled=False)
    try:
        path, panel, _captions, _live = client.predict("female_1", "Hello.", 1.0, "auto", None, api_name="/preset")
    finally:
        client.close()
    assert Path(path).read_bytes()[:4] == b"RIFF" and "female_1" in panel


@pytest.mark.parametrize("path", ["/tts", "/v1/audio/speech", "/gradio_api/upload"])
def test_upload_limit_is_enforced_before_the_body_is_read(make_service, live_server, web_settings,
                                                          path):
    service = make_service(dataclasses.replace(web_settings, max_upload_mb=1))
    server = live_server(service, with_ui=True)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {500 * 1024 * 1024}\r\n\r\n").encode()
    took, answer = raw_request(server.port, head, b'{"text": "', wait=10)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert took < 5, f"answered after {took:.1f} s: it waited for the body"
    assert b"payload_too_large" in answer and b"limit" in answer


def test_chunked_bodies_are_counted_too(make_service, live_server, web_settings):
    """No Content-Length: the 413 comes while the client is still sending, not after 26 MB."""
    import select

    service = make_service(dataclasses.replace(web_settings, max_upload_mb=1))
    server = live_server(service, with_ui=False)
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /tts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"A" * 65536
        for _ in range(400):  # 26 MB if nobody stops it
            if select.select([sock], [], [], 0)[0]:
                answer = sock.recv(65536)
                break
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:  # the server closed the connection on us: read what it said
                break
            sent += len(chunk)
        sock.settimeout(10)
        while not answer.endswith(b"}"):  # the JSON body may come in a second packet
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"payload_too_large" in answer
    assert sent < 12 * 1024 * 1024, f"{sent} bytes went in before the server refused"
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


def traversal_urls(settings: Settings) -> list[str]:
    root = settings.root
    outputs, prompts = settings.outputs_path.resolve(), settings.prompts_path.resolve()
    targets = [f"{prompts}/teacher.json", f"{outputs}/../prompts/teacher.json", "/etc/passwd",
               f"{REPO}/app.py", f"{REPO}/models/README.md", "app.py", "../../../../etc/passwd",
               f"{outputs}/%2e%2e/prompts/teacher.json", f"{outputs}%2f..%2fprompts%2fteacher.json",
               f"{prompts}", f"{outputs}", f"{root}", "%2fetc%2fpasswd", "..%2f..%2f..%2fetc%2fpasswd",
               f"{outputs}/..%5cprompts%5cteacher.json", "~/.bashrc", f"{prompts}/teacher.json%00.wav"]
    urls = []
    for target in targets:
        urls += [f"/gradio_api/file={target}", f"/file={target}", f"/gradio_api/file/{target}"]
    urls += ["/static/../../../../etc/passwd", "/assets/..%2f..%2f..%2f..%2fetc%2fpasswd",
             "/gradio_api/static/..%2f..%2f..%2fetc%2fpasswd", "/outputs/", "/prompts/teacher.json",
             "/..%2fprompts%2fteacher.json", "/gradio_api/favicon.ico/../../prompts/teacher.json"]
    return urls


def test_no_file_outside_the_intended_routes_is_served(ui_server):
    settings = ui_server.settings
    outputs = settings.outputs_path.resolve()
    (outputs / ".tmp-halfdone.wav").write_bytes(b"RIFF" + b"\0" * 40 + SECRET)
    for url in traversal_urls(settings):
        _, answer = raw_request(ui_server.port, f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                f"Connection: close\r\n\r\n".encode())
        status = answer.split(b"\r\n", 1)[0]
        assert not status.endswith(b"200 OK") or url.endswith(".ico"), (url, status)
        assert SECRET not in answer and b"root:x:0:0" not in answer, url
        assert b"def build_app" not in answer, url
    # A half-written WAV (temp name) is never served, even by its exact path...
    r = httpx.get(f"{ui_server.url}/gradio_api/file={outputs}/.tmp-halfdone.wav")
    assert r.status_code == 404 and SECRET not in r.content
    # ...while a finished output of the page is served through the page's own file route.
    from gradio_client import Client

    client = Client(ui_server.url, verbose=False, download_files=str(settings.root / "dl"),
                    analytics_enabled=False)
    try:
        path, _, _, _ = client.predict("female_1", "Hello.", 1.0, "auto", None, api_name="/preset")
    finally:
        client.close()
    assert Path(path).read_bytes()[:4] == b"RIFF"
    assert httpx.get(ui_server.url + "/health").json()["status"] == "ok"


NETNS_CLIENT = r"""
import json, os, socket, subprocess, sys, time
import httpx
probe = socket.socket(); probe.settimeout(2)
unreachable = probe.connect_ex(("1.1.1.1", 80)) != 0
port = int(sys.argv[1])
env = dict(os.environ, COSYEDGE_OUTPUTS_DIR=sys.argv[2], COSYEDGE_IDLE_UNLOAD_MINUTES="0",
           GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1")
server = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], env=env)
url = f"http://127.0.0.1:{port}"
out = {"network_unreachable": unreachable}
try:
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.3)
    out["page"] = httpx.get(url + "/", timeout=60).status_code
    r = httpx.post(url + "/tts", json={"text": "[en]Hello there.[zh]你好。[ja]こんにちは。"}, timeout=600)
    out["tts"] = r.status_code
    out["duration"] = r.json().get("duration") if r.status_code == 200 else r.text[:300]
    r = httpx.post(url + "/v1/audio/speech", json={"model": "tts-1", "input": "One more.",
                   "voice": "female_1", "response_format": "wav"}, timeout=600)
    out["speech"] = r.status_code
    from gradio_client import Client
    client = Client(url, verbose=False, download_files=sys.argv[2] + "/dl", analytics_enabled=False)
    path, panel, _captions, _live = client.predict("female_1", "From the page.", 1.0, "auto", None, api_name="/preset")
    client.close()
    out["gradio_wav"] = open(path, "rb").read(4).decode("latin-1")
    out["health"] = httpx.get(url + "/health").json()
finally:
    server.terminate()
    server.wait(30)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("ip") is None,
                    reason="needs util-linux unshare and iproute2 ip")
def test_app_works_in_a_network_namespace_without_network(kokoro_models_dir, tmp_path):
    """The real app with the embedded engine, inside `unshare -rn` (only `lo`, brought up by us)."""
    if not (kokoro_models_dir / "kokoro-int8").is_dir():
        pytest.fail("embedded model missing")
    env = {**os.environ, "COSYEDGE_MODELS_DIR": str(kokoro_models_dir)}
    script = tmp_path / "netns_client.py"
    script.write_text(NETNS_CLIENT)
    command = f"ip link set lo up && exec {sys.executable} {script} {free_port()} {tmp_path}"
    proc = subprocess.run(["unshare", "-rn", "sh", "-c", command], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["network_unreachable"] is True, "the namespace still had a route out"
    assert result["page"] == 200 and result["tts"] == 200 and result["speech"] == 200, result
    assert result["duration"] > 1.0 and result["gradio_wav"] == "RIFF"
    assert result["health"]["loaded"] is True
