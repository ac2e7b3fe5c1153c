"""`python -m cosyedge voices`: list the preset voices of the configured model (on stdout, one a line;
a model without presets lists none and says on stderr that it clones from a recording)."""

from __future__ import annotations

import argparse
import sys

from cosyedge import config
from cosyedge.service.engine_holder import load_engine


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("voices", help="list preset voices")
    config.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    engine = load_engine(config.from_args(args))
    names = engine.presets()
    for name in names:
        print(name)
    if not names:
        print(f"the model {engine.model_id} has no preset voices: it clones a voice from a recording of 3-10 s "
              "(save one with `python -m cosyedge library save`, then `speak --voice-id ID`; saved voices: "
              "`python -m cosyedge library list`)", file=sys.stderr)
    return 0
