"""English (and other espeak-ng) IPA through a separate espeak-ng worker process.

Where espeak-ng comes from: the ``espeakng-loader`` PyPI wheel, which ships ``libespeak-ng.so`` and
``espeak-ng-data`` (espeak-ng 1.52), so a fresh machine needs only pip, no Debian package. The wheel
declares no licence of its own in its metadata; the library and data it carries are espeak-ng's, which is
GPL-3.0-or-later.

Licence choice: cosyedge is Apache-2.0. Loading libespeak-ng into our own process (ctypes/dlopen) would
make the running program one combined work, and the FSF's reading of the GPL is that such a work must
be distributable under the GPL as a whole; Apache-2.0 is GPL-3-compatible, so this is not forbidden,
but it would blur what licence the application carries and would oblige whoever ships a box image
with everything to treat it as GPL. Talking to a separate program over a pipe is, in the FSF's own FAQ,
ordinary communication between separate programs. So the library is loaded only by
:mod:`cosyedge.text.espeak_worker`, a small stand-alone script started as its own process; the
application sends it plain text and reads back IPA strings as JSON lines, and never loads the library
itself. Whoever redistributes espeak-ng (the wheel, or a box image containing it) must still follow
the GPL for that part: ship its source or an offer for it. This is an engineering note, not legal
advice.

The process boundary also helps reliability: a crash or hang inside espeak-ng costs one English run
(logged, dropped) and a restart of the worker, never the server. The price is one extra small process
(~15 MB) started on the first English word, and a pipe round trip per clause (well under a millisecond).
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import weakref
from pathlib import Path

from ..errors import ModelMissingError

logger = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("espeak_worker.py")
INSTALL_HINT = "pip install espeakng-loader==0.2.4"


class EspeakUnavailable(ModelMissingError):
    """The espeak-ng worker cannot start (library or data missing); the message says what to install."""


class EspeakClient:
    """Owns one espeak-ng worker process; thread-safe; restarts the worker after a crash or hang.

    ``ipa(text, voice)`` returns espeak's IPA for ``text`` (clauses joined by spaces, ``^`` ties
    kept), or ``None`` when espeak failed on this text (the caller drops the text and logs).
    """

    def __init__(self, timeout_s: float = 10.0, start_timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.version: str | None = None
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    def ipa(self, text: str, voice: str = "en-us") -> str | None:
        if not text.strip():
            return ""
        with self._lock:
            process = self._ensure_started()
            try:
                process.stdin.write(json.dumps({"text": text, "voice": voice}, ensure_ascii=False) + "\n")
                process.stdin.flush()
                reply = self._read(process, self.timeout_s)
            except (OSError, ValueError, TimeoutError) as exc:
                logger.warning("espeak-ng worker failed on a %d-character text (%s); restarting it",
                               len(text), exc)
                self._stop()
                return None
        if "error" in reply:
            logger.warning("espeak-ng could not phonemize a %d-character text: %s", len(text), reply["error"])
            return None
        return " ".join(part.strip() for part in reply.get("ipa", []) if part.strip())

    @property
    def worker_pid(self) -> int | None:
        """The process id of the running worker, or None when none runs (the next call starts one)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def close(self) -> None:
        """Stop the worker (it is started again on the next call)."""
        with self._lock:
            self._stop()

    def _ensure_started(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        try:
            process = subprocess.Popen(
                [sys.executable, "-u", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, encoding="utf-8", bufsize=1,
                env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        except OSError as exc:
            raise EspeakUnavailable(f"cannot start the espeak-ng worker: {exc}") from exc
        try:
            hello = self._read(process, self.start_timeout_s)
        except (OSError, ValueError, TimeoutError) as exc:
            process.kill()
            raise EspeakUnavailable(f"the espeak-ng worker did not start ({exc}); "
                                    f"reinstall it with: {INSTALL_HINT}") from exc
        if not hello.get("ready"):
            process.kill()
            raise EspeakUnavailable(f"espeak-ng is not usable ({hello.get('fatal', hello)}); "
                                    f"reinstall it with: {INSTALL_HINT}")
        self._process = process
        self._finalizer = weakref.finalize(self, _kill, process)
        if self.version != hello.get("version"):
            self.version = hello.get("version")
            logger.info("espeak-ng %s worker started (pid %d)", self.version, process.pid)
        return process

    @staticmethod
    def _read(process: subprocess.Popen, timeout_s: float) -> dict:
        """One JSON line from the worker, or TimeoutError / ValueError (EOF, garbage)."""
        ready, _, _ = select.select([process.stdout], [], [], timeout_s)
        if not ready:
            raise TimeoutError(f"no answer within {timeout_s:g} s")
        line = process.stdout.readline()
        if not line:
            raise ValueError(f"worker exited with code {process.poll()}")
        return json.loads(line)

    def _stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._process = None


def _kill(process: subprocess.Popen) -> None:
    """Close the pipe (the worker exits on end of input); kill it if it does not go quickly."""
    try:
        if process.stdin:
            process.stdin.close()
        process.wait(timeout=2)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()
    finally:
        if process.stdout:
            process.stdout.close()
