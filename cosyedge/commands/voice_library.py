"""`python -m cosyedge library save|list|rename|transcript|delete|export|import`: manage saved voices.

Saved voices live in ``prompts/library/`` (see ``cosyedge.voices.library``); `speak --voice-id ID` reads one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cosyedge import config
from cosyedge.audio import condition_prompt
from cosyedge.voices.consent import CONSENT_QUESTION, require_consent
from cosyedge.voices.consent import describe as describe_consent
from cosyedge.errors import InputError, ModelMissingError, PayloadTooLargeError
from cosyedge.files import write_atomic
from cosyedge.service.requests import SEED_PRESETS
from cosyedge.service.voice_progress import STAGE_WORDS
from cosyedge.voices.library import PromptCache, VoiceLibrary, refuse_preset_name

LIBRARY_DIR = "library"
CACHE_DIR = "cache"


def library_for(settings: config.Settings) -> VoiceLibrary:
    return VoiceLibrary(settings.prompts_path / LIBRARY_DIR, max_voices=settings.voice_library_max_voices,
                        max_bytes=int(settings.voice_library_max_mb * 1e6))


def cache_for(settings: config.Settings) -> PromptCache:
    return PromptCache(settings.prompts_path / CACHE_DIR)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("library", help="saved voices: save, list, rename, delete, export, import")
    actions = parser.add_subparsers(dest="action", required=True)

    save = actions.add_parser("save", help="condition a recording and save it as a named voice")
    save.add_argument("name", help="voice name (letters, digits, space . _ -, or a Chinese name)")
    save.add_argument("audio", type=Path, help="WAV, FLAC, OGG or MP3 recording; 3-10 s of one speaker "
                      "works best (up to 30 s is used whole)")
    save.add_argument("--transcript", default="", help="what is said in the recording (helps CosyVoice; "
                      "without it the recording is heard offline at its first CosyVoice clone, or now with "
                      "`library transcript ID --hear`)")
    save.add_argument("--encode", action="store_true",
                      help="also encode it now for the configured model (on Kokoro, which cannot clone: "
                           "the closest built-in voice, about a second), so its first use reads the cache")
    save.add_argument("--consent", action="store_true",
                      help=f"confirm that {CONSENT_QUESTION} (required; recorded with the voice)")
    save.add_argument("--overwrite", action="store_true", help="replace a saved voice of the same id")
    save.set_defaults(func=run_save)

    listing = actions.add_parser("list", help="list saved voices")
    listing.set_defaults(func=run_list)

    rename = actions.add_parser("rename", help="rename a saved voice")
    rename.add_argument("voice_id")
    rename.add_argument("new_name")
    rename.set_defaults(func=run_rename)

    transcript = actions.add_parser("transcript", help="show, set or hear (offline) a saved voice's transcript")
    transcript.add_argument("voice_id")
    given = transcript.add_mutually_exclusive_group()
    given.add_argument("text", nargs="?", help="the new transcript (typed: always used for zero-shot)")
    given.add_argument("--hear", action="store_true",
                       help="hear the recording with the offline recognizer and store what it heard")
    transcript.set_defaults(func=run_transcript)

    delete = actions.add_parser("delete", help="delete a saved voice")
    delete.add_argument("voice_id")
    delete.set_defaults(func=run_delete)

    export = actions.add_parser("export", help="export a saved voice as one .zip")
    export.add_argument("voice_id")
    export.add_argument("-o", "--output", type=Path, help="zip to write (default: <id>.voice.zip)")
    export.set_defaults(func=run_export)

    imp = actions.add_parser("import", help="import a voice .zip made by `library export`")
    imp.add_argument("zip", type=Path)
    imp.add_argument("--name", help="save under another name (with --rename when its id is here)")
    imp.add_argument("--rename", action="store_true",
                     help="when a voice with its id is here already: import it as a copy, under --name or "
                          "its own name numbered (without this the import is refused: voice_exists)")
    imp.add_argument("--overwrite", action="store_true", help="replace the voice with its id")
    imp.set_defaults(func=run_import)

    for p in (save, listing, rename, transcript, delete, export, imp):
        config.add_arguments(p)


def _read(path: Path, limit: int) -> bytes:
    try:
        size = path.stat().st_size
        if size > limit:  # refuse before reading it
            raise PayloadTooLargeError(f"{path} is {size / 1e6:.1f} MB; the limit is {limit / 1e6:.1f} MB "
                                       "(COSYEDGE_MAX_UPLOAD_MB)")
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _limit(settings: config.Settings) -> int:
    return int(settings.max_upload_mb * 1024 * 1024)


def describe(engine: Any, voice: Any) -> str | None:
    """One line on what a prompt became on ``engine``: its ``describe_voice`` label ("closest built-in
    voice / 最接近的内置音色: female_2" on Kokoro), None on an engine that clones it."""
    label = getattr(engine, "describe_voice", None)
    return str(label(voice)) if callable(label) else None


def _engine_name(settings: config.Settings) -> str:
    """The configured model's engine, from its manifest ("" when the model is not set up yet)."""
    from cosyedge.catalog.manifest import read_identity

    try:
        return read_identity(settings.model_path).engine
    except ModelMissingError:  # a missing model must not stop saving a recording
        return ""


def run_save(args: argparse.Namespace) -> int:
    settings = config.from_args(args)
    consent = require_consent(args.consent, "saving a voice")  # before the recording is read
    refuse_preset_name(args.name, SEED_PRESETS)  # the service's check before its engine loads
    prompt = condition_prompt(_read(args.audio, _limit(settings)), max_bytes=_limit(settings),
                              filename=args.audio.name)
    engine_name, model_id = _engine_name(settings), settings.model
    if args.encode:
        from cosyedge.service.engine_holder import load_engine

        engine = load_engine(settings)
        refuse_preset_name(args.name, engine.presets())
        # the service's lookup of this voice reads the same entry: the cache keys both (key_transcript)
        encoded = cache_for(settings).get_or_encode(engine, prompt, args.transcript, step=_say_step)
        engine_name, model_id = engine.name, engine.model_id
        if describe(engine, encoded):
            print(describe(engine, encoded))
    library = library_for(settings)
    info = library.save(args.name, prompt, args.transcript, engine=engine_name, model_id=model_id,
                        consent=consent, overwrite=args.overwrite)
    if args.encode:  # as a job using the voice records it (Service._record_encoding)
        sounded = getattr(engine, "sounded", None)
        library.record_encoding(info.id, engine_name, model_id, sounded(encoded) if callable(sounded) else None)
    for note in prompt.notes:
        print(f"note: {note}")
    print(f"saved voice {info.id!r} ({info.name}, {info.duration_s:.1f} s)")
    return 0


def _say_step(step: int, total: int, stage: str) -> None:
    """A step of the voice's encoding as it starts, on stderr: CosyVoice's takes seconds to tens of
    seconds on two cores (the page and /jobs say the same steps)."""
    print(f"preparing the voice: step {step} of {total} ({STAGE_WORDS.get(stage, stage)})",
          file=sys.stderr, flush=True)


def run_list(args: argparse.Namespace) -> int:
    voices = library_for(config.from_args(args)).list()
    if not voices:
        print("no saved voices (save one with `python -m cosyedge library save NAME AUDIO --consent`)")
    for v in voices:
        print(f"{v.id}\t{v.name}\t{v.duration_s:.1f} s\t{describe_consent(v.consent)}")
    return 0


def run_rename(args: argparse.Namespace) -> int:
    info = library_for(config.from_args(args)).rename(args.voice_id, args.new_name, presets=SEED_PRESETS)
    print(f"renamed {info.id!r} to {info.name} (its id stays)")
    return 0


def run_transcript(args: argparse.Namespace) -> int:
    """Set (TEXT), hear (--hear) or show a saved voice's transcript and where it came from."""
    settings = config.from_args(args)
    library = library_for(settings)
    if args.text is not None:
        library.set_transcript(args.voice_id, args.text)
    elif args.hear:
        from cosyedge.listening.asr import Recognizer
        from cosyedge.voices.transcripts import hear

        prompt, _, _ = library.load(args.voice_id)
        recognizer = Recognizer.for_models(settings.models_path, settings.threads, idle_seconds=0)
        heard = hear(recognizer.transcribe, prompt.pcm, prompt.sample_rate)
        recognizer.release()
        library.set_transcript(args.voice_id, heard.text, source="asr", confidence=heard.confidence)
    _, text, info = library.load(args.voice_id)
    if not text:
        print(f"{info.id}: no transcript (heard offline at its first CosyVoice clone, or now with --hear)")
    elif info.transcript_source == "asr":
        from cosyedge.voices.transcripts import ZERO_SHOT_CONFIDENCE

        confidence = info.transcript_confidence or 0.0
        verdict = "zero-shot" if confidence >= ZERO_SHOT_CONFIDENCE else "cross-lingual until corrected"
        print(f"{info.id}: heard offline, confidence {confidence:.2f} ({verdict}): {text}")
    else:
        print(f"{info.id}: typed: {text}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    library_for(config.from_args(args)).delete(args.voice_id)
    print(f"deleted {args.voice_id!r}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from cosyedge.voices.exchange import export_voice

    settings = config.from_args(args)
    data = export_voice(library_for(settings), cache_for(settings), args.voice_id, settings.models_path,
                        max_bytes=_limit(settings))
    output = args.output or Path(f"{args.voice_id}.voice.zip")
    try:
        write_atomic(output, data, suffix=".zip")  # never a half-written zip under the final name
    except OSError as exc:
        raise InputError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output} ({len(data) / 1024:.0f} KiB)")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from cosyedge.voices.exchange import import_voice

    settings = config.from_args(args)
    done = import_voice(library_for(settings), cache_for(settings), _read(args.zip, _limit(settings)),
                        settings.models_path, max_bytes=_limit(settings), name=args.name, rename=args.rename,
                        overwrite=args.overwrite, presets=SEED_PRESETS)
    print(f"imported voice {done.info.id!r} ({done.info.name})")
    for model in done.reused:
        print(f"  reused its encoding for {model}: no encoding needed there")
    for model, why in done.skipped:
        print(f"  its encoding for {model} left out ({why}): encoded again at its first use")
    return 0
