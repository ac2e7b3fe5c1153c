"""`python -m cosyedge sweep [--dry-run]`: apply the janitor's policy to outputs/ once."""

from __future__ import annotations

import argparse
import logging
import time

from cosyedge import config

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep", help="remove old outputs now (the janitor's policy, once)",
        description="Remove outputs older than COSYEDGE_JANITOR_MAX_AGE_HOURS, then the oldest while "
                    "outputs/ holds more than COSYEDGE_JANITOR_MAX_TOTAL_MB or "
                    "COSYEDGE_JANITOR_MAX_FILES. Saved voices (prompts/) and models are never touched; "
                    "outputs written in the last two minutes are kept.")
    config.add_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cosyedge.ops.janitor import JanitorPolicy, sweep

    settings = config.from_args(args)
    removed = sweep(settings.outputs_path, time.time(), JanitorPolicy.from_settings(settings),
                    dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for path in removed:
        print(f"{verb} {path}")
    print(f"sweep: {verb} {len(removed)} file(s) from {settings.outputs_path}")
    return 0
