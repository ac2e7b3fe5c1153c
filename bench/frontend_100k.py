"""Time KokoroFrontend.sentences on 100,000-character texts, one per language, in one process.

    .venv/bin/python bench/frontend_100k.py [--memory]

Prints one line per text: characters, sentences, seconds, longest sentence in phonemes; with
``--memory`` also the peak Python heap (tracemalloc, which slows the run 2-5x, so time and memory
come from separate runs). Run ``uptime`` before and after; record both.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyedge.engines.kokoro.frontend import KokoroFrontend  # noqa: E402

UNITS = {
    "zh": "今天天气真好，我们一起去公园散步吧。",
    "zh-numbers": "我有3个苹果，价格是12.5元，时间10:30，电话13800138000。",
    "zh-unpunctuated": "我们一起去公园散步吧",
    "en": "It's a sunny day, and we are going to the park together. ",
    "en-numbers": "In 2024 I paid $5 for 3 items at 10:30 pm, 50% off. ",
    "ja": "今日はとても良い天気ですね、公園に行きましょう。",
    "mixed-tags": "[zh]今天天气真好[en]It's sunny today[ja]こんにちは",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory", action="store_true",
                        help="also the peak Python heap (tracemalloc: 2-5x slower)")
    memory = parser.parse_args().memory
    frontend = KokoroFrontend()
    frontend.sentences("预热。Warm up. ウォーム")  # load jieba, pyopenjtalk, espeak worker first
    for name, unit in UNITS.items():
        text = (unit * (100_000 // len(unit) + 1))[:100_000]
        if memory:
            tracemalloc.start()
        start = time.perf_counter()
        sentences = frontend.sentences(text)
        seconds = time.perf_counter() - start
        heap = ""
        if memory:
            heap = f"  peak heap {tracemalloc.get_traced_memory()[1] / 2**20:5.1f} MiB"
            tracemalloc.stop()
        longest = max(len(s.phonemes) for s in sentences)
        print(f"{name:16s} {len(text):7d} chars {len(sentences):6d} sentences {seconds:6.1f} s "
              f"longest {longest:3d} phonemes{heap}")
    frontend.close()


if __name__ == "__main__":
    main()
