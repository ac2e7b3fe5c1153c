"""Write cosyedge/engines/kokoro/probe_table.npz: the voice match's probe results for each bundled
pack and blended preset (embedding, duration, F0, level gap), so a fresh process need not probe them.
Re-run after changing the packs, the presets, the probe sentences or the speaker encoder; a stale
table is ignored at run time (its fingerprint no longer matches), never used.

    .venv/bin/python scripts/make_probe_table.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyedge import config  # noqa: E402
from cosyedge.engines.loader import load_engine  # noqa: E402
from cosyedge.engines.kokoro import voice_match  # noqa: E402



def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    engine = load_engine(config.from_env({}, onnx_threads=2))
    path = voice_match.save_probe_table(engine)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
