"""`python -m cosyedge models list|import|check`: the models on this box, the checked import of a copied
one, and the speed-mode check of one.

``models import PATH`` copies a model folder (from a USB stick or another box) under models/ and
checks every file's sha256 against its manifest on the copy before it appears there
(:meth:`cosyedge.catalog.models.ModelCatalog.import_folder`); the page's model picker and
``GET /models`` list it from then on. ``models check MODEL_ID`` runs the speed-mode check
(:mod:`cosyedge.service.mode_check`) in this process, without the app's queue, and stores its
``modes.json``; ``models list`` shows each model's verdicts.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from cosyedge import config
from cosyedge.catalog.mode_verdicts import read_record
from cosyedge.catalog.models import ModelCatalog, human_size


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("models", help="models on this box: list, import a copied model folder, check speed modes")
    actions = parser.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="usable models (engine, capabilities, size, licence)")
    listing.set_defaults(func=run_list)

    imp = actions.add_parser("import", help="copy a model folder under models/, checking every sha256 first")
    imp.add_argument("path", type=Path, help="the copied model folder (it holds manifest.json)")
    imp.add_argument("--name", help="the model id to import it as (default: the folder's name)")
    imp.set_defaults(func=run_import)

    check = actions.add_parser("check", help="judge each speed (quality) mode against exact on this model and "
                                             "store the verdicts (modes.json)")
    check.add_argument("model_id", help="the model to check (its folder under models/)")
    check.add_argument("--voice", help="a preset speaker or saved voice id to check with (default: the "
                                       "model's first preset; models without presets need one)")
    check.add_argument("--lines", type=int, default=None, metavar="N",
                       help="lines per language of the check's set (default: all six)")
    check.add_argument("--languages", metavar="zh,en,...",
                       help="only these languages of the set (default: every one the model speaks)")
    check.set_defaults(func=run_check)

    for p in (listing, imp, check):
        config.add_arguments(p)


def run_list(args: argparse.Namespace) -> int:
    settings = config.from_args(args)
    usable, unusable = ModelCatalog(settings.models_path).scan()
    if not usable:
        print(f"no usable model under {settings.models_path} (run `python -m cosyedge setup-model`)")
    for info in usable:
        mark = "*" if info.id == settings.model else " "
        print(f"{mark} {info.id}\t{info.engine}\t{info.capabilities_line()}\t{human_size(info.size_bytes)}"
              f"\t{info.licence}")
        if info.reconvert:
            print(f"    convert again? {info.reconvert}")
        record = read_record(settings.models_path / info.id)
        if record is not None:
            print(f"    speed modes: {verdict_line(record.summary())}")
    for entry in unusable:
        print(f"! {entry.id}\tnot usable: {entry.problem}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    settings = config.from_args(args)
    info = ModelCatalog(settings.models_path).import_folder(args.path, args.name)
    print(f"model {info.id!r} is in {settings.models_path / info.id}: {info.engine}, "
          f"{info.capabilities_line()}, {human_size(info.size_bytes)}, licence {info.licence}; "
          "every sha256 matched its manifest")
    print(f"serve it with --model {info.id}, or pick it on the page's Models tab")
    return 0


def verdict_line(summary: dict) -> str:
    """One line of a model's speed-mode verdicts (``GET /models``' ``speed_modes``)."""
    parts = []
    for name, mode in summary["modes"].items():
        delta = mode["intelligibility_delta"]
        heard = f", intelligibility {delta:+.1f} points" if delta is not None else ""
        verdict = "recommended" if mode["recommended"] else "not recommended"
        parts.append(f"{name} {verdict} (similarity {mode['similarity']:.2f}{heard})")
    voice = summary["voice"]
    when = f"checked {summary['checked']} with {voice.get('kind', '')} {voice.get('name', '')}".replace("  ", " ")
    stale = "; STALE: the model changed since, check again" if summary["stale"] else ""
    return f"{'; '.join(parts)} ({when}{stale})"


def run_check(args: argparse.Namespace) -> int:
    """The check in this process, on the engine of ``model_id`` (no queue: nothing else runs here)."""
    from cosyedge.service.facade import Service

    settings = dataclasses.replace(config.from_args(args), model=args.model_id, auto_mode_check=False)
    ModelCatalog(settings.models_path).get(args.model_id)  # NotFoundError / InputError naming the problem
    service = Service(settings)
    service.mode_checks.per_language = args.lines
    service.mode_checks.languages = tuple(args.languages.split(",")) if args.languages else None
    try:
        service.check_modes(args.model_id, args.voice)
        last = ""
        while not service.mode_checks.wait(2.0):
            progress = service.mode_checks.status(args.model_id).progress
            line = f"{progress.step}: {progress.done}/{progress.total}"
            if line != last:
                print(line, file=sys.stderr)
                last = line
        answer = service.mode_check(args.model_id)
    except KeyboardInterrupt:
        service.cancel_mode_check()
        service.mode_checks.wait(30)
        print("cancelled: the previous verdicts, if any, are kept", file=sys.stderr)
        return 130
    finally:
        service.close()
    status = answer["status"]
    if status["state"] != "done":
        error = status.get("error") or {}
        print(f"the check did not finish ({status['state']}): {error.get('message', '')}", file=sys.stderr)
        return 1
    record = read_record(settings.models_path / args.model_id)
    assert record is not None
    for name, entry in record.data["modes"].items():
        figures, verdict = entry["figures"], entry["verdict"]
        delta = figures["intelligibility_delta"]
        print(f"{name}: {'recommended on this model' if verdict['recommended'] else 'not recommended'}"
              f" (similarity {figures['similarity']:.3f}, intelligibility "
              f"{'not scored' if delta is None else f'{delta:+.1f} points'}, "
              f"duration x{figures['duration_ratio']:.2f}, "
              f"mel {figures['mel_distance_db']:.1f} dB, {entry['render_seconds']:.0f} s to render)"
              + (f"; failed: {', '.join(verdict['failed'])}" if verdict["failed"] else ""))
    data = record.data
    print(f"exact: {data['exact']['render_seconds']:.0f} s to render {data['exact']['audio_seconds']:.0f} s of audio; "
          f"checked with {data['voice']['kind']} {data['voice']['name']} by {data['judge']}, {data['lines']} lines "
          f"({', '.join(data['languages'])}) in {data['seconds']:.0f} s; stored in "
          f"{settings.models_path / args.model_id / 'modes.json'}")
    for note in data.get("notes") or []:
        print(f"note: {note.get('message', '')}")
    return 0
