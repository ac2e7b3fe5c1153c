"""Write cosyedge/engines/kokoro/voice_table.npz: each preset's median F0 and speaker d-vector on the
table lines, which the closest built-in voice rule reads (cosyedge/engines/kokoro/closest_voice.py).
Re-run after changing the packs, the presets or their recipes, the table lines or the speaker
encoder; a stale table is not used at run time (its fingerprint no longer matches).

    .venv/bin/python scripts/make_voice_table.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyedge import config  # noqa: E402
from cosyedge.engines.kokoro import closest_voice  # noqa: E402
from cosyedge.engines.loader import load_engine  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    engine = load_engine(config.from_env({}, onnx_threads=2))
    try:
        for voice in closest_voice.save_table(engine):
            print(f"{voice.name}: median F0 {voice.f0_hz:.1f} Hz")
    finally:
        engine.close()
    print(f"wrote {closest_voice.TABLE_FILE} ({closest_voice.TABLE_FILE.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
