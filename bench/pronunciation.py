"""How often a word is read as the pronunciation dictionary says, with and without its entry.

    .venv/bin/python bench/pronunciation.py [--cosyvoice3 DIR] [--write]

The set (``bench/pronunciation_set.json``): 20 Mandarin polyphone sentences and 10 English names,
each with the entry a teacher would add. Kokoro is judged from the phonemes its model receives (the
entry's reading, as the G2P renders a reading, found in the sentence's phonemes); Fun-CosyVoice3
from the token ids its LLM receives (the entry's phone tokens among them), on the tiny converted
model under ``test-artifacts/tiny-models-v3`` (``python -m tests.helpers.cosyvoice3_fixture`` in
.venv-ref builds it; the tokenizer and text pass are the real ones, only the weights are tiny).
Without an entry CosyVoice3's tokens carry characters, never phones: what it then says is the
model's own guess, which tokens cannot show (reported as 0 %). Lab log: docs/bench-log/text-and-presets.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import LOG_DIR, ROOT, add_write_option, load_average, measured_header, record_round  # noqa: E402

SET = ROOT / "bench" / "pronunciation_set.json"
LOG = LOG_DIR / "text-and-presets.md"
CURRENT_ROWS = "'Pronunciation dictionary: polyphones and names read as the entry says'"
V3_DIR = ROOT / "test-artifacts" / "tiny-models-v3" / "models"


def kokoro_rows(items: list[dict]) -> list[tuple[str, bool, bool]]:
    """(word, read as the entry without it, with it) per item, from Kokoro's phonemes."""
    from cosyedge.engines.kokoro.frontend import KokoroFrontend
    from cosyedge.lexicon.entries import make_entry
    from cosyedge.lexicon.matching import Lexicon

    frontend = KokoroFrontend()
    rows = []
    try:
        for item in items:
            entry = make_entry(item["language"], item["word"], item["reading"])
            expected = frontend.g2p.reading(entry.reading)[0].replace(" ", "")
            said = []
            for lexicon in (Lexicon(), Lexicon([entry])):
                frontend.readings = lambda lexicon=lexicon: lexicon
                phonemes = "".join(s.phonemes for s in frontend.sentences(item["text"])).replace(" ", "")
                said.append(expected in phonemes)
            rows.append((item["word"], said[0], said[1]))
    finally:
        frontend.close()
    return rows


def cosyvoice3_rows(items: list[dict], models: Path) -> list[tuple[str, bool, bool]]:
    """(word, phone tokens without the entry, with it) per item, from the LLM's text ids."""
    from cosyedge.config import Settings
    from cosyedge.engines.loader import load_engine
    from cosyedge.lexicon.entries import make_entry
    from cosyedge.lexicon.matching import Lexicon

    engine = load_engine(Settings(models_dir=models, model="cosyvoice3-tiny", onnx_threads=1,
                                  thread_calibration=False))
    rows = []
    try:
        for item in items:
            entry = make_entry(item["language"], item["word"], item["reading"])
            spelled, _ = engine.described.spell_reading(entry)
            expected = engine.tokenizer.encode(spelled or "")
            said = []
            for lexicon in (Lexicon(), Lexicon([entry])):
                engine.pronounce_with(lambda lexicon=lexicon: lexicon)
                ids = [i for s in engine.analyze(item["text"]).sentences for i in engine.tokenizer.encode(s)]
                said.append(bool(expected) and any(ids[k:k + len(expected)] == expected for k in range(len(ids))))
            rows.append((item["word"], said[0], said[1]))
    finally:
        engine.close()
    return rows


def share(rows: list[tuple[str, bool, bool]], column: int) -> str:
    hits = sum(row[column] for row in rows)
    return f"{hits}/{len(rows)} ({100 * hits / len(rows):.0f} %)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cosyvoice3", type=Path, default=V3_DIR, help=f"models/ holding cosyvoice3-tiny "
                        f"(default {V3_DIR.relative_to(ROOT)})")
    add_write_option(parser, LOG)
    args = parser.parse_args()
    started, load_before = dt.datetime.now(dt.timezone.utc), load_average()
    items = json.loads(SET.read_text(encoding="utf-8"))["items"]
    t0 = time.perf_counter()
    results = {"Kokoro (phonemes)": kokoro_rows(items)}
    if (args.cosyvoice3 / "cosyvoice3-tiny" / "manifest.json").is_file():
        results["Fun-CosyVoice3 (tokens)"] = cosyvoice3_rows(items, args.cosyvoice3)
    else:
        print(f"no cosyvoice3-tiny under {args.cosyvoice3}: CosyVoice3 left out", file=sys.stderr)
    lines = ["| engine | set | read as the entry says without it | with it |", "|---|---|---|---|"]
    for engine, rows in results.items():
        for name, part in (("20 Mandarin polyphones", rows[:20]), ("10 English names", rows[20:])):
            lines.append(f"| {engine} | {name} | {share(part, 1)} | {share(part, 2)} |")
    missed = {engine: [w for w, _, with_entry in rows if not with_entry] for engine, rows in results.items()}
    body = (measured_header(started, "bench/pronunciation.py", load_before) + "\n\n" + "\n".join(lines)
            + f"\n\nNot read as the entry says even with it: {missed}. Run time {time.perf_counter() - t0:.0f} s.")
    print(body)
    if args.write:
        record_round(args.write, "Pronunciation dictionary", "bench/pronunciation.py", started, body, CURRENT_ROWS)


if __name__ == "__main__":
    main()
