"""`python -m cosyedge voices`: list the preset voices of the configured model."""

from __future__ import annotations

import argparse

from cosyedge import config
from cosyedge.service.engine_holder import load_engine


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("voices", help="list preset voices")
    config.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    engine = load_engine(config.from_args(args))
    for name in engine.presets():
        print(name)
    return 0
