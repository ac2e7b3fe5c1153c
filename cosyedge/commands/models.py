"""`python -m cosyedge models list|import`: the models on this box, and the checked import of a copied one.

``models import PATH`` copies a model folder (from a USB stick or another box) under models/ and
checks every file's sha256 against its manifest on the copy before it appears there
(:meth:`cosyedge.catalog.models.ModelCatalog.import_folder`); the page's model picker and
``GET /models`` list it from then on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cosyedge import config
from cosyedge.catalog.models import ModelCatalog, human_size


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("models", help="models on this box: list, import a copied model folder")
    actions = parser.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="usable models (engine, capabilities, size, licence)")
    listing.set_defaults(func=run_list)

    imp = actions.add_parser("import", help="copy a model folder under models/, checking every sha256 first")
    imp.add_argument("path", type=Path, help="the copied model folder (it holds manifest.json)")
    imp.add_argument("--name", help="the model id to import it as (default: the folder's name)")
    imp.set_defaults(func=run_import)

    for p in (listing, imp):
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
