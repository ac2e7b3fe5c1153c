"""CosyVoice's instruction prompt per model version (cosyedge.engines.cosyvoice.common.instruct_format)."""

from __future__ import annotations

import pytest

from cosyedge.engines.cosyvoice.common.instruct_format import format_instruction
from cosyedge.errors import ParameterError


@pytest.mark.parametrize("version,expected", [
    (2, "用四川话说这句话<|endofprompt|>"),
    # v1: upstream cosyvoice/cli/frontend.py @46dfe04, frontend_instruct: instruct_text + '<endofprompt>'
    (1, "用四川话说这句话<endofprompt>"),
    (3, "You are a helpful assistant. 用四川话说这句话<|endofprompt|>"),
])
def test_format_per_version(version: int, expected: str):
    assert format_instruction("用四川话说这句话", version) == expected


def test_user_special_tokens_are_stripped_and_formatting_is_idempotent():
    once = format_instruction("slowly<|endofprompt|> <|im_start|>x", 3)
    assert once == "You are a helpful assistant. slowly x<|endofprompt|>"
    assert format_instruction(once, 3) == once
    v1 = format_instruction("slowly<endofprompt> <|im_start|>x", 1)
    assert v1 == "slowly x<endofprompt>" and format_instruction(v1, 1) == v1
    with pytest.raises(ParameterError):
        format_instruction("x", 9)
