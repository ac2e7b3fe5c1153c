"""Stand-alone espeak-ng phonemizer process: JSON lines in, JSON lines out.

Started by :mod:`cosyedge.text.espeak` as ``python espeak_worker.py`` and never imported by the
application, so libespeak-ng (GPL-3.0) is loaded only into this separate process (see the licence note
in :mod:`cosyedge.text.espeak`). It uses only the standard library and ``espeakng_loader``.

Protocol, one JSON object per line, UTF-8:

* on start the worker writes ``{"ready": true, "version": "..."}`` or ``{"fatal": "why"}`` and exits;
* request ``{"text": "hello world", "voice": "en-us"}`` -> reply ``{"ipa": ["həlˈo^ʊ wˈɜːld"]}``
  (one string per clause espeak found, diphthongs and affricates joined by ``^``) or
  ``{"error": "why"}``. End of input ends the worker.
"""

from __future__ import annotations

import ctypes
import json
import sys

_UTF8 = 1  # espeakCHARS_UTF8
_IPA_WITH_TIES = 0x02 | 0x80 | (ord("^") << 8)  # IPA output, '^' tie inside multi-letter phonemes
_RETRIEVAL = 1  # AUDIO_OUTPUT_RETRIEVAL: no sound device is ever opened


def _load() -> tuple[ctypes.CDLL, str]:
    import espeakng_loader

    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
    lib.espeak_Info.restype = ctypes.c_char_p
    lib.espeak_Info.argtypes = [ctypes.c_void_p]
    if lib.espeak_Initialize(_RETRIEVAL, 0, espeakng_loader.get_data_path().encode(), 0) < 0:
        raise RuntimeError("espeak_Initialize failed")
    return lib, lib.espeak_Info(None).decode()


def _phonemize(lib: ctypes.CDLL, text: str) -> list[str]:
    buffer = ctypes.create_string_buffer(text.encode("utf-8"))
    pointer = ctypes.c_char_p(ctypes.addressof(buffer))
    clauses = []
    while pointer.value:
        result = lib.espeak_TextToPhonemes(ctypes.byref(pointer), _UTF8, _IPA_WITH_TIES)
        if result:
            clauses.append(result.decode("utf-8", errors="replace"))
    return clauses


def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def main() -> int:
    try:
        lib, version = _load()
    except Exception as exc:  # report any load failure to the parent, which decides what to say
        _send({"fatal": f"{type(exc).__name__}: {exc}"})
        return 1
    _send({"ready": True, "version": version})
    voice = None
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if request["voice"] != voice:
                if lib.espeak_SetVoiceByName(request["voice"].encode()) != 0:
                    raise ValueError(f"espeak-ng has no voice {request['voice']!r}")
                voice = request["voice"]
            _send({"ipa": _phonemize(lib, request["text"])})
        except Exception as exc:  # a bad request must not end the worker
            _send({"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
