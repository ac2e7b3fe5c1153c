"""`python -m cosyedge speak TEXT -o OUT.wav`: synthesize text to a WAV file, offline."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
from pathlib import Path

import numpy as np

from cosyedge import config
from cosyedge.instruct import plan as instruct
from cosyedge.service import synthesis
from cosyedge.audio import to_pcm16, wav_bytes, wav_stream_header
from cosyedge.commands.voice_library import describe
from cosyedge.errors import ParameterError, TextError
from cosyedge.service.engine_holder import load_engine
from cosyedge.service.facade import Service
from cosyedge.service.captions import Captions, CaptionTrack, caption_format
from cosyedge.service.outputs import write_captions, write_wav
from cosyedge.service.requests import QUALITY_NAMES, REQUEST_LANGUAGES, TTSRequest

#: ``-f -`` reads the text from stdin, ``-o -`` writes the WAV to stdout (messages then go to stderr).
STDIO = "-"
#: The notes ``speak`` prints as they are: the flow steps used, and how a prompt's built-in voice was
#: chosen or that its sound changed (the rest is for the REST answer and the page).
VOICE_NOTE_PREFIXES = ("flow_steps", "closest_voice", "voice_sound_changed")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("speak", help="read a text aloud into a WAV file")
    parser.add_argument("text", nargs="?", help="text to read (or use -f)")
    parser.add_argument("-f", "--file", help="read the text from a UTF-8 file, '-' for stdin")
    parser.add_argument("--voice", default=None,
                        help="preset voice (see `voices`; default: the model's first, e.g. female_1)")
    parser.add_argument("--voice-id", dest="voice_id",
                        help="saved voice (see `library list`); overrides --voice")
    parser.add_argument("--speed", type=float, default=1.0, help="0.5-2.0")
    parser.add_argument("--lang", default="auto", choices=REQUEST_LANGUAGES,
                        help="language of untagged text (ko/de/es/fr/it/ru: CosyVoice3 models only)")
    parser.add_argument("--instruct", metavar="TEXT",
                        help='how to read it, e.g. "slowly and warmly" or "用开心的语气说"; '
                             "what was applied / not supported is printed")
    parser.add_argument("--flow-steps", dest="flow_steps", type=int, default=None,
                        help="CosyVoice flow steps: 10 = standard (upstream); fewer is faster, not "
                             "validated on real weights; wins over the --quality mode's steps")
    parser.add_argument("--quality", default=None, metavar="MODE",
                        help=f"CosyVoice speed mode: {', '.join(QUALITY_NAMES)} (default: COSYEDGE_QUALITY, else "
                             "exact = upstream); the others are faster, not validated on real weights; "
                             "the levers used are printed")
    parser.add_argument("-o", "--output", required=True, help="WAV file to write, '-' for stdout")
    parser.add_argument("--captions", metavar="FILE", type=Path,
                        help="also write the captions: FILE.srt (SubRip, one cue per sentence) or FILE.vtt "
                             "(WebVTT, with word timings where the engine knows them: Kokoro)")
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


def check_output(output: str, flag: str = "-o") -> None:
    """Refuse an output the WAV (or with ``flag="--captions"`` the captions) could never be written
    to, before the model loads and the text is synthesized (missing folders are created by the write)."""
    if output == STDIO:
        return
    path = Path(output)
    if path.is_dir():
        example = "speech.wav" if flag == "-o" else "speech.vtt"
        raise ParameterError(f"{flag} {output} is a folder; give a file name such as {path / example}")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ParameterError(f"cannot write {flag} {output}: {folder} is not a writable folder")


def write_output(output: str, audio: np.ndarray, sample_rate: int) -> str:
    """Write the WAV (atomically, or to stdout for ``-``); what was written, for the last message.
    A full disk is the service's StorageFullError (:func:`cosyedge.service.outputs.write_wav`)."""
    if output == STDIO:
        sys.stdout.buffer.write(wav_bytes(audio, sample_rate))
        sys.stdout.buffer.flush()
        return "WAV to stdout"
    try:
        return str(write_wav(Path(output), audio, sample_rate))
    except OSError as exc:
        raise ParameterError(f"cannot write {output}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    """The service's request path without its queue: prepare (every check, before the model
    loads), resolve against the engine, synthesize, apply the instruction's effects, write."""
    settings = config.from_args(args)
    request = TTSRequest(text=read_text(args), speaker=args.voice, voice_id=args.voice_id,
                         instruct=args.instruct, speed=args.speed, language=args.lang,
                         flow_steps=args.flow_steps, quality=args.quality)
    service = Service(settings, engine_factory=functools.partial(load_engine, settings))
    prepared = service.prepare(request)
    check_output(args.output)
    if args.captions is not None:
        caption_format(args.captions.suffix)  # .srt or .vtt, before the model loads
        check_output(str(args.captions), "--captions")
    say = sys.stderr if args.output == STDIO else sys.stdout  # stdout may carry the WAV itself
    with service.holder.use() as engine:
        resolved = service.resolve(engine, prepared)
        voice, plan, encoded = resolved.choice.voice, resolved.plan, resolved.choice.encoded
        if encoded is not None and describe(engine, encoded):
            print(describe(engine, encoded), file=say)
        for note in resolved.notes:
            # the levers used, how the voice was chosen, what the pronunciation dictionary did, an
            # instruction read as controls: said as they are
            code = getattr(note, "code", "")
            if code.startswith(VOICE_NOTE_PREFIXES + ("reading_", "quality")) or code == "instruct_as_controls":
                print(note, file=say)
        if args.output == STDIO:
            return _stream_to_stdout(engine, resolved, settings.max_text_chars, say, args.captions)
        result = synthesis.synthesize(engine, resolved.analysis, voice, resolved.options,
                                      max_chars=settings.max_text_chars)
    audio = result.audio
    if plan is not None:
        audio = instruct.postprocess(audio, result.sample_rate, plan)
        for line in plan.applied:
            print(f"applied: {line}", file=say)
        for line in plan.not_supported:
            print(f"not applied: {line}", file=say)
    prompt = resolved.choice.prompt
    if prompt is not None and audio.size:  # the figure the service reports, on the audio written
        from cosyedge.listening.speaker import similarity

        print(f"speaker similarity to the prompt, measured on this audio: "
              f"{similarity(audio, result.sample_rate, prompt.pcm, prompt.sample_rate):.4f}", file=say)
    written = write_output(args.output, audio, result.sample_rate)
    print(f"wrote {written} ({len(audio) / result.sample_rate:.2f} s, {len(result.sentences)} sentences)",
          file=say)
    if args.captions is not None:
        captions = result.captions.scaled(audio.size / result.audio.size if result.audio.size else 1.0)
        _write_captions(args.captions, captions, say)
    return 0


def _write_captions(path: Path, captions: Captions, say) -> None:  # noqa: ANN001
    written = write_captions(path, captions)
    words = " with word timings" if captions.has_words and path.suffix.lower() == ".vtt" else ""
    print(f"wrote {written} ({len(captions.cues)} cues{words})", file=say)


def _stream_to_stdout(engine, resolved, max_chars: int, say, captions: Path | None = None) -> int:  # noqa: ANN001
    """``-o -``: a WAV of unknown length on stdout, each piece written as soon as it is made (a
    CosyVoice sentence hop by hop), so a player reading the pipe starts at the first hop; the
    captions, when asked for, are written at the end."""
    plan, sample_rate = resolved.plan, engine.capabilities.sample_rate
    out = sys.stdout.buffer
    out.write(wav_stream_header(sample_rate))
    out.flush()
    samples, sentences = 0, 0
    track = CaptionTrack(sample_rate)
    options = dataclasses.replace(resolved.options, stream=True)
    for chunk, piece in synthesis.stream(engine, resolved.analysis, resolved.choice.voice, options, max_chars):
        made = piece
        if plan is not None and piece.size:
            piece = instruct.postprocess(piece, sample_rate, plan)
        track.add(chunk, made, piece.size)
        out.write(to_pcm16(piece).tobytes())
        out.flush()
        samples += piece.size
        sentences += not chunk.continues
    if plan is not None:
        for line in plan.applied:
            print(f"applied: {line}", file=say)
        for line in plan.not_supported:
            print(f"not applied: {line}", file=say)
    print(f"wrote WAV to stdout ({samples / sample_rate:.2f} s, {sentences} sentences, streamed)", file=say)
    if captions is not None:
        _write_captions(captions, track.captions(), say)
    return 0
