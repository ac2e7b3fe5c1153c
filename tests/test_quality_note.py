"""The answer's ``quality_levers`` note names the levers a model applied and, apart, those it has no use
for (an engine's ``inapplicable_levers``: CosyVoice-300M's left context), in English and on the page."""

from __future__ import annotations

from dataclasses import replace

from cosyedge.engines.cosyvoice.common.quality import QUALITY_NAMES, levers_for
from cosyedge.notes import code_of
from cosyedge.service.reports import flow_notes
from cosyedge.service.requests import TTSRequest
from cosyedge.web.page_words import chinese_note
from tests.helpers.fake_engine import FakeEngine

WHY = "the flow is not chunk-causal"


class OneModelEngine(FakeEngine):
    """An engine with the modes that applies no left context and a first hop in its own tokens."""

    inapplicable_levers = {"left_chunks": WHY}

    def __init__(self) -> None:
        super().__init__(quality_modes=QUALITY_NAMES)

    def quality_levers(self, quality, flow_steps=None):  # noqa: ANN001, ANN201
        levers = levers_for(quality, flow_steps)
        return replace(levers, left_chunks=0, first_hop_tokens=2 * levers.first_hop_tokens)


def _quality_note(engine, quality: str):  # noqa: ANN001, ANN202
    (note,) = [n for n in flow_notes(TTSRequest(text="Hello.", quality=quality), engine, quality)
               if code_of(n) == "quality_levers"]
    return note


def test_a_lever_the_model_has_no_use_for_is_named_apart_with_its_reason():
    note = _quality_note(OneModelEngine(), "live")
    assert note.params["not_applicable"] == ("left_chunks",) and note.params["left_chunks"] == 0
    assert str(note).startswith("quality live: 4 flow steps, no CFG, first hop 20 tokens "
                                f"(the first hop: streamed answers); left context does not apply: {WHY}; ")
    assert "chunks of left context" not in note and "all left context" not in note
    chinese = chinese_note(note)
    assert "4 步流匹配，不用 CFG，首跳 20 个 token；有界左侧上下文不适用于此模型" in chinese
    assert "全部左侧上下文" not in chinese


def test_an_engine_that_applies_every_lever_says_them_all_as_before():
    note = _quality_note(FakeEngine(quality_modes=QUALITY_NAMES), "live")
    assert note.params["not_applicable"] == ()
    assert str(note).startswith("quality live: 4 flow steps, no CFG, 4 chunks of left context, first hop 10 "
                                "tokens (the left context and first hop: streamed answers); not validated")
    assert "左侧上下文 4 块，首跳 10 个 token；未在真实权重上验证" in chinese_note(note)
