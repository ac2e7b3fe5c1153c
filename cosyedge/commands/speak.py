"""`python -m cosyedge speak TEXT -o OUT.wav`: synthesize text to a WAV file, offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cosyedge import config, instruct, synthesis
from cosyedge.audio import write_wav_atomic
from cosyedge.engines import load_engine
from cosyedge.engines.base import LANGUAGES, SynthesisOptions, VoicePrompt
from cosyedge.errors import TextError


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
    parser.add_argument("-o", "--output", required=True, help="WAV file to write")
    config.add_arguments(parser)
    parser.set_defaults(func=run)


def read_text(args: argparse.Namespace) -> str:
    if args.text is not None and args.file is not None:
        raise TextError("give the text either as an argument or with -f, not both")
    if args.file == "-":
        return sys.stdin.read()
    if args.file is not None:
        try:
            return Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TextError(f"cannot read text file {args.file}: {exc}") from None
    if args.text is None:
        raise TextError("no text: give TEXT or -f FILE")
    return args.text


def run(args: argparse.Namespace) -> int:
    settings = config.from_args(args)
    text = read_text(args)
    synthesis.check_text(text, settings.max_text_chars)  # fail before loading the model
    engine = load_engine(settings)
    options = SynthesisOptions(speed=args.speed, language=args.lang)
    voice: str | VoicePrompt = args.voice
    if args.voice_id:
        from cosyedge.commands.voice_library import describe, saved_voice_prompt

        voice = saved_voice_prompt(settings, engine, args.voice_id)
        if describe(voice.meta):
            print(describe(voice.meta))
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
            print(f"applied: {line}")
        for line in the_plan.not_supported:
            print(f"not applied: {line}")
    path = write_wav_atomic(args.output, audio, result.sample_rate)
    print(f"wrote {path} ({len(audio) / result.sample_rate:.2f} s, {len(result.sentences)} sentences)")
    return 0
