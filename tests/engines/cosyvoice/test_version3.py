"""CosyVoice3's own run-time rules (engines/cosyvoice/version3.py and the v3 LLM stop rule), on stand-ins."""

from __future__ import annotations

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.v3 import version as version3
from cosyedge.engines.cosyvoice.common.llm import LLMConfig, SpeechLM
from cosyedge.engines.cosyvoice.common.sampling import greedy


class _Scripted:
    """A stand-in LLM session whose step ``i`` puts its arg-max on ``ids[i]``."""

    def __init__(self, ids, vocab=6761, layers=1):
        self.ids, self.vocab, self.step = list(ids), vocab, 0
        self.outputs = ["logp"] + [f"present_{k}_0" for k in ("key", "value")]

    def run(self, names, feed):
        logp = np.full((1, self.vocab), -20.0, dtype=np.float32)
        logp[0, self.ids[self.step]] = 0.0
        self.step += 1
        past = feed["past_key_0"]
        grown = np.zeros((1, past.shape[1], past.shape[2] + 1, past.shape[3]), np.float32)
        return [logp, grown, grown]


@pytest.mark.parametrize("stop", [6562, 6600, 6760])
def test_any_extra_output_ends_decoding_even_before_the_minimum_length(stop):
    config = LLMConfig(hidden=4, layers=1, kv_heads=1, head_dim=2, speech_vocab=6761, eos=6562,
                       stop_from=6561, min_len_masked=6561)
    tables = np.zeros((6761, 4), np.float32)
    lm = SpeechLM(_Scripted([5, 6561, 7, stop, 8]), config, np.zeros((10, 4), np.float32), None, tables,
                  np.zeros((2, 4), np.float32))
    # 6561 is masked below the minimum length (the chooser takes the next best: 0), any other id >= 6561 stops.
    assert lm.generate([1, 2, 3], greedy(config.masked_id, mask_fill=False)) == [5, 0, 7]


def test_silent_token_rule():
    silent = sorted(version3.SILENT_TOKENS)[0]
    run = [silent] * 8 + [7] + [silent] * 6
    assert version3.drop_long_silences(run) == [silent] * 5 + [7] + [silent] * 5


def test_every_v3_input_carries_the_end_of_prompt():
    assert version3.zero_shot_prompt("Hi.").startswith("You are a helpful assistant.<|endofprompt|>")
    assert version3.cross_lingual_text("Hi.") == "You are a helpful assistant.<|endofprompt|>Hi."
    assert version3.cross_lingual_text("x<|endofprompt|>y") == "x<|endofprompt|>y"
