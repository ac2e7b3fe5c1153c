"""What each engine does natively, known before it loads, by engine name (the manifest's
``ModelIdentity.engine``, :mod:`cosyedge.catalog.manifest`): the catalog and the page say it up front.
The catalog never imports an engine; each engine's own ``capabilities`` agree with this table
(tests/engines/kokoro/test_real_model.py, tests/engines/cosyvoice/test_engine.py, test_engine_v1.py).
"""

from __future__ import annotations

#: (clone, instruct) by engine name. cosyvoice1: only its -Instruct variant follows instructions;
#: until it loads the page says no.
NATIVE_ABILITIES: dict[str, tuple[bool, bool]] = {"kokoro": (False, False), "cosyvoice2": (True, True),
                                                  "cosyvoice3": (True, True), "cosyvoice1": (True, False)}

#: The engines that offer ``quality`` modes (CosyVoice-300M, CosyVoice2/3: the flow's speed levers), so the
#: page can show its quality control before the engine loads; their ``capabilities.quality_modes`` agree.
QUALITY_ENGINES: frozenset[str] = frozenset({"cosyvoice1", "cosyvoice2", "cosyvoice3"})

#: What an engine's native instruct follows, in the instruct tab's words, by engine name (none: the
#: page says no more than that it follows instructions). Fun-CosyVoice3's is upstream's instruction
#: list (ace7c47 common.py).
INSTRUCT_NOTES: dict[str, str] = {
    "cosyvoice3": ("Fun-CosyVoice3: dialects (广东话, 东北话, 四川话, 上海话, 闽南话, 天津话 … 17 in all), emotions "
                   "(happy / 开心, sad / 伤心, angry / 生气), loud or soft, fast or slow; speaks zh en ja ko de es "
                   "fr it ru / 支持方言、情感、音量与语速指令"),
}
