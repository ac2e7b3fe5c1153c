"""`python -m cosyedge speak TEXT -o OUT.wav`: synthesize text to a WAV file, offline."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

import numpy as np

from cosyedge import config, instruct, synthesis
from cosyedge.audio import wav_bytes, write_wav_atomic
from cosyedge.engines import load_engine
from cosyedge.engines.base import LANGUAGES, SynthesisOptions, VoicePrompt
from cosyedge.errors import ParameterError, StorageFullError, TextError

#: ``-f -`` reads the text from stdin, ``-o -`` writes the WAV to stdout (messages then go to stderr).
STDIO = "-"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("speak", help="read a text aloud into a WAV file")
    parser.add_argument("text", nargs="?", help="text to read (or use -f)")
    parser.add_argument("-f", "--file", help="read the text from a UTF-8 file, '-' for stdin")
    parser.add_argument("--voice", default="female_1", help="preset voice (see `voices`)")
    parser.add_argument("--voice-id", dest="voice_id",
                        help="saved voice (see `library list`); overrides --voice")
    parser.add_argument("--speed", type=float, default=1.0, help="0.5-2.0")
    parser.add_argument("--lang", default="auto", choices=LANGUAGES, help="language of untagged text")
    parser.add_argument("--instruct", metavar="TEXT",
                        help='how to read it, e.g. "slowly and warmly" or "用开心的语气说"; '
                             "what was applied / not supported is printed")
    parser.add_argument("-o", "--output", required=True, help="WAV file to write, '-' for stdout")
    config.add_arguments(parser)
    parser.set_defaults(func=run)


def read_text(args: argparse.Namespace) -> str:
    if args.text is not None and args.file is not None:
        raise TextError("give the text either as an argument or with -f, not both")
    if args.file == STDIO:
        return _utf8(sys.stdin.buffer.read(), "standard input")  # bytes: the locale must not decide
    if args.file is not None:
        try:
            data = Path(args.file).read_bytes()
        except OSError as exc:
            raise TextError(f"cannot read text file {args.file}: {exc.strerror or exc}") from None
        return _utf8(data, f"text file {args.file}")
    if args.text is None:
        raise TextError("no text: give TEXT or -f FILE")
    return args.text


def _utf8(data: bytes, label: str) -> str:
    """UTF-8 text (a leading BOM, as Windows editors write, is dropped), or TextError naming the
    first byte that is not UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TextError(f"cannot read {label}: it is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                        f"position {exc.start}); save it as UTF-8") from None


def check_output(output: str) -> None:
    """Refuse an output the WAV could never be written to, before the model loads and the text is
    synthesized (missing folders are created by the write)."""
    if output == STDIO:
        return
    path = Path(output)
    if path.is_dir():
        raise ParameterError(f"-o {output} is a folder; give a file name such as {path / 'speech.wav'}")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ParameterError(f"cannot write -o {output}: {folder} is not a writable folder")


def write_output(output: str, audio: np.ndarray, sample_rate: int) -> str:
    """Write the WAV (atomically, or to stdout for ``-``); what was written, for the last message."""
    if output == STDIO:
        sys.stdout.buffer.write(wav_bytes(audio, sample_rate))
        sys.stdout.buffer.flush()
        return "WAV to stdout"
    try:
        return str(write_wav_atomic(output, audio, sample_rate))
    except OSError as exc:
        error = StorageFullError if exc.errno == errno.ENOSPC else ParameterError
        raise error(f"cannot write {output}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    settings = config.from_args(args)
    text = read_text(args)
    synthesis.check_text(text, settings.max_text_chars)  # fail before loading the model
    check_output(args.output)
    say = sys.stderr if args.output == STDIO else sys.stdout  # stdout may carry the WAV itself
    engine = load_engine(settings)
    options = SynthesisOptions(speed=args.speed, language=args.lang)
    voice: str | VoicePrompt = args.voice
    if args.voice_id:
        from cosyedge.commands.voice_library import describe, saved_voice_prompt

        voice = saved_voice_prompt(settings, engine, args.voice_id)
        if describe(voice.meta):
            print(describe(voice.meta), file=say)
    the_plan = None
    if args.instruct:
        the_plan = instruct.plan_for_engine(args.instruct, engine)
        app = instruct.apply_plan(the_plan, options, voice, speed_range=engine.capabilities.speed_range)
        options, voice, the_plan = app.options, app.voice, app.plan
    result = synthesis.synthesize(engine, text, voice, options, max_chars=settings.max_text_chars)
    audio = result.audio
    if the_plan is not None:
        audio = instruct.postprocess(audio, result.sample_rate, the_plan)
        for line in the_plan.applied:
            print(f"applied: {line}", file=say)
        for line in the_plan.not_supported:
            print(f"not applied: {line}", file=say)
    written = write_output(args.output, audio, result.sample_rate)
    print(f"wrote {written} ({len(audio) / result.sample_rate:.2f} s, {len(result.sentences)} sentences)",
          file=say)
    return 0
