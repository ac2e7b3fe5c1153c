"""CosyVoice-300M's LLM step graphs: format 2 (cache written in place) against format 1 (models converted
before it, cache concatenated), on one tiny checkpoint converted both ways.

* both load; a format-1 model runs its old path (:class:`ConcatSteps`), a new one :class:`BufferedSteps`;
* the same inputs give the same log-probs at every step, over more than :data:`TABLE_ROWS` positions
  (so the positional table is rebuilt on the way) and the same greedy tokens;
* format 2 grows nothing per step: every cache row is written once into buffers allocated when the
  sequence starts, and its graph concatenates no cache and transposes no positional rows.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("torch", reason="the reference needs torch: scripts/install_reference.sh")
pytestmark = pytest.mark.reference

from cosyedge.engines.cosyvoice.common.manifest import ModelDir  # noqa: E402
from cosyedge.engines.cosyvoice.common.sampling import greedy  # noqa: E402
from cosyedge.engines.cosyvoice.v1.llm import TABLE_ROWS, BufferedSteps, ConcatSteps, SpeechLMv1  # noqa: E402
from tests.helpers import cosyvoice1_reference as reference  # noqa: E402
from tests.helpers.cosyvoice1_format1 import rewrite_as_format1  # noqa: E402


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A tiny fp32 conversion (``new``, format 2) and its copy rewritten to format 1 (``old``)."""
    from cosyedge.export.cosyvoice.v1.convert import convert

    root = tmp_path_factory.mktemp("v1steps")
    src = reference.write_checkpoint(root / "CosyVoice-300M", llm=reference.build_llm(seed=9))
    convert(src, root / "new", quantize="none", steps=["llm"])
    shutil.copytree(root / "new", root / "old")
    rewrite_as_format1(root / "old", src / "llm.pt")
    return root


@pytest.fixture(scope="module")
def models(converted):
    """(format-2 LLM, format-1 LLM)."""
    return tuple(SpeechLMv1.load(ModelDir.load(converted / name)) for name in ("new", "old"))


@pytest.fixture(scope="module")
def new_graph(converted):
    import onnx

    return onnx.load(str(converted / "new" / "llm_step.onnx"), load_external_data=False).graph


def test_a_model_converted_before_loads_and_steps_as_the_new_one(models):
    new, old = models
    assert (new.step_format, old.step_format) == (2, 1)
    rng = np.random.default_rng(4)
    prompt = rng.standard_normal((9, new.config.input_size)).astype(np.float32)
    steps = [rng.standard_normal((1, new.config.input_size)).astype(np.float32) for _ in range(TABLE_ROWS + 10)]
    runs = new.steps(len(prompt) + len(steps)), old.steps(len(prompt) + len(steps))
    assert isinstance(runs[0], BufferedSteps) and isinstance(runs[1], ConcatSteps)
    for i, x in enumerate([prompt, *steps]):
        a, b = runs[0](x), runs[1](x)
        assert np.abs(a - b).max() < 1e-4, f"step {i}"


def test_greedy_tokens_are_the_same_on_both_formats(models):
    new, old = models
    text, prompt_text = [50260, 1000, 2000, 3000, 51000, 77, 4242], [500, 600]
    embedding = np.random.default_rng(5).standard_normal(192).astype(np.float32)
    tokens = [lm.generate(text, greedy(reference.EOS), prompt_text, (), embedding, max_ratio=5) for lm in models]
    assert tokens[0] == tokens[1] and len(tokens[0]) >= 2 * len(text)


def test_format2_writes_each_row_once_into_buffers_it_keeps(models):
    new, _ = models
    run = new.steps(40)
    buffers = [buffer for buffer, _ in run._buffers]  # noqa: SLF001 - the buffers are what is checked
    addresses = [b.__array_interface__["data"][0] for b in buffers]
    rng = np.random.default_rng(6)
    run(rng.standard_normal((5, new.config.input_size)).astype(np.float32))
    written = [b[0, :, :5].copy() for b in buffers]
    for _ in range(3):
        run(rng.standard_normal((1, new.config.input_size)).astype(np.float32))
    assert run.length == 8
    for buffer, before, address in zip(buffers, written, addresses):
        assert buffer.__array_interface__["data"][0] == address
        assert np.array_equal(buffer[0, :, :5], before)               # earlier rows untouched
        assert np.all(np.any(buffer[0, :, 5:8] != 0, axis=-1))       # one new row per step
        assert not np.any(buffer[0, :, 8:])                           # nothing past the sequence
    with pytest.raises(ValueError, match="holds 40 positions"):
        run(np.zeros((33, new.config.input_size), dtype=np.float32))


def test_format2_graph_concatenates_no_cache_and_transposes_no_positions(new_graph):
    graph = new_graph
    produced = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    caches = [i.name for i in graph.input if i.name.startswith("past_")]
    assert caches and all(node.op_type == "GroupQueryAttention" for name in caches for node in readers[name])
    assert all(produced[o.name].op_type == "GroupQueryAttention" for o in graph.output if o.name.startswith("present_"))
    tables = [i.name for i in graph.input if i.name.startswith("pos_table_")]
    for name in tables:
        assert [(n.op_type, {a.name: a.i for a in n.attribute}.get("transB")) for n in readers[name]] == \
            [("FusedMatMul", 0)]


def test_the_catalog_says_a_format1_model_gains_the_in_place_cache_by_converting_again(converted):
    from cosyedge.catalog.models import ModelCatalog

    listed = {info.id: info for info in ModelCatalog(converted).models()}
    assert listed["new"].engine == listed["old"].engine == "cosyvoice1"
    assert listed["new"].reconvert == ""
    assert listed["old"].reconvert.startswith("converted with the first LLM step graph")
    assert "Converting it again brings the in-place LLM cache: faster decoding" in listed["old"].reconvert
