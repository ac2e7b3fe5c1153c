"""`python -m cosyedge selftest`: check that this installation can serve; exit 0 only if it can."""

from __future__ import annotations

import argparse
import logging

from cosyedge import config

logger = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "selftest", help="check imports, model files, data dirs and one synthesis",
        description="Check imports, model manifests (sha256), writable data directories and one "
                    "short synthesis. Prints one line per check; exits 0 only if all pass.")
    config.add_arguments(parser)
    parser.add_argument("--no-synthesis", action="store_true",
                        help="skip the synthesis check (faster; the rest still runs)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cosyedge.ops.selftest import run_checks

    settings = config.from_args(args)
    results = run_checks(settings, synthesis=not args.no_synthesis)
    for result in results:
        print(result.line(), flush=True)
    failed = [r.name for r in results if not r.ok]
    print(f"selftest: {'FAILED (' + ', '.join(failed) + ')' if failed else 'all passed'}")
    return 1 if failed else 0
