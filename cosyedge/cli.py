"""Command-line interface: `python -m cosyedge <command> ...`.

Each command lives in its own module under ``cosyedge/commands/`` and exposes
``register(subparsers)``; the module's parser sets ``func(args) -> int``. Errors from the
exception tree become a one-line reason on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from cosyedge.config import SettingsError
from cosyedge.errors import CosyedgeError

logger = logging.getLogger(__name__)

#: Command modules, in help order. Add a module here to add a command.
COMMAND_MODULES = (
    "cosyedge.commands.speak",
    "cosyedge.commands.voices",
    "cosyedge.commands.voice_library",
    "cosyedge.commands.pronunciations",
    "cosyedge.commands.models",
    "cosyedge.commands.setup_model",
    "cosyedge.commands.selftest",
    "cosyedge.commands.sweep",
    "cosyedge.commands.convert",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cosyedge",
                                     description="Offline voice-cloning text-to-speech")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (CosyedgeError, SettingsError) as exc:
        # the code, as REST gives it, for a script to branch on (no script should parse the message)
        code = exc.code if isinstance(exc, CosyedgeError) and exc.code != exc.kind else None
        print(f"error: {exc}" + (f" [{code}]" if code else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
