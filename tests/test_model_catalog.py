"""cosyedge.catalog.models: which model folders are usable, and the sha256-checked import."""

from __future__ import annotations

import json

import pytest

from cosyedge.errors import ConflictError, InputError, NotFoundError
from cosyedge.catalog.models import LICENCE_UNKNOWN, ModelCatalog
from tests.helpers.model_folders import COSYVOICE_LICENCE, make_model


def test_scan_lists_usable_models_with_engine_capabilities_size_and_licence(tmp_path):
    models = tmp_path / "models"
    make_model(models, "kokoro-int8")
    make_model(models, "cosyvoice2-int8", engine="cosyvoice2", licence=COSYVOICE_LICENCE,
               files={"llm.onnx": b"x" * 5000})
    make_model(models, "old-convert", engine="cosyvoice2", licence=None)
    usable, unusable = ModelCatalog(models).scan()
    by_id = {info.id: info for info in usable}
    assert sorted(by_id) == ["cosyvoice2-int8", "kokoro-int8", "old-convert"] and unusable == []
    kokoro, cosy = by_id["kokoro-int8"], by_id["cosyvoice2-int8"]
    assert (kokoro.engine, kokoro.native_clone, kokoro.native_instruct) == ("kokoro", False, False)
    assert (cosy.engine, cosy.native_clone, cosy.native_instruct) == ("cosyvoice2", True, True)
    assert cosy.size_bytes == 5000 and kokoro.size_bytes == 1202
    assert kokoro.licence.startswith("weights: Apache-2.0 (hexgrad/Kokoro-82M)")
    assert cosy.licence == "weights: Apache-2.0 (FunAudioLLM/CosyVoice2-0.5B); code: Apache-2.0"
    assert by_id["old-convert"].licence == LICENCE_UNKNOWN
    assert cosy.as_dict()["capabilities"] == {"native_clone": True, "native_instruct": True}


def test_folders_without_a_usable_model_are_named_with_the_reason(tmp_path):
    models = tmp_path / "models"
    make_model(models, "good")
    (models / "no-manifest").mkdir()
    make_model(models, "unknown-engine", engine="vits")
    broken = make_model(models, "missing-file")
    (broken / "vocab.json").unlink()
    resized = make_model(models, "resized")
    (resized / "model.onnx").write_bytes(b"short")
    (models / ".import-half-1").mkdir()  # a staging folder is never listed
    usable, unusable = ModelCatalog(models).scan()
    assert [info.id for info in usable] == ["good"]
    problems = {entry.id: entry.problem for entry in unusable}
    assert set(problems) == {"no-manifest", "unknown-engine", "missing-file", "resized"}
    assert "manifest.json missing" in problems["no-manifest"]
    assert "'vits'" in problems["unknown-engine"]
    assert "vocab.json is missing" in problems["missing-file"]
    assert "model.onnx has the wrong size" in problems["resized"]


def test_get_names_an_unknown_or_unusable_model(tmp_path):
    models = tmp_path / "models"
    make_model(models, "good")
    make_model(models, "odd", engine="vits")
    catalog = ModelCatalog(models)
    assert catalog.get("good").engine == "kokoro"
    with pytest.raises(NotFoundError) as unknown:
        catalog.get("nope")
    assert unknown.value.code == "model_unknown" and "good" in unknown.value.message
    with pytest.raises(NotFoundError):
        catalog.get("../good")
    with pytest.raises(InputError) as odd:
        catalog.get("odd")
    assert odd.value.code == "model_not_usable"


def test_import_copies_a_folder_after_checking_every_sha256(tmp_path):
    source = make_model(tmp_path / "usb", "cosyvoice2-int8", engine="cosyvoice2",
                        licence=COSYVOICE_LICENCE, files={"llm.onnx": b"w" * 3000, "sub/tok.json": b"{}"})
    catalog = ModelCatalog(tmp_path / "models")
    info = catalog.import_folder(source)
    assert info.id == "cosyvoice2-int8" and info.engine == "cosyvoice2"
    assert (tmp_path / "models" / "cosyvoice2-int8" / "sub" / "tok.json").read_bytes() == b"{}"
    assert [m.id for m in catalog.models()] == ["cosyvoice2-int8"]
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["cosyvoice2-int8"]
    with pytest.raises(ConflictError) as again:
        catalog.import_folder(source)
    assert again.value.code == "model_exists"
    assert catalog.import_folder(source, name="second").id == "second"


def test_a_folder_with_a_wrong_sha256_never_appears(tmp_path):
    source = make_model(tmp_path / "usb", "damaged")
    data = bytearray((source / "model.onnx").read_bytes())
    data[10] ^= 0xFF  # same size, other bytes: only the hash can tell
    (source / "model.onnx").write_bytes(bytes(data))
    models = tmp_path / "models"
    make_model(models, "kokoro-int8")
    catalog = ModelCatalog(models)
    with pytest.raises(InputError) as corrupt:
        catalog.import_folder(source)
    assert corrupt.value.code == "model_file_corrupt"
    assert "model.onnx does not match its sha256" in corrupt.value.message
    assert str(source) in corrupt.value.message  # the folder the user passed, not the staging copy
    assert sorted(p.name for p in models.iterdir()) == ["kokoro-int8"]  # no staging folder left
    assert [m.id for m in catalog.models()] == ["kokoro-int8"]


def test_a_copy_already_under_models_is_checked_in_place(tmp_path):
    models = tmp_path / "models"
    folder = make_model(models, "copied")
    assert ModelCatalog(models).import_folder(folder).id == "copied"
    (folder / "vocab.json").write_bytes(b"[]")  # same size, other content
    with pytest.raises(InputError) as corrupt:
        ModelCatalog(models).import_folder(folder)
    assert corrupt.value.code == "model_file_corrupt"


@pytest.mark.parametrize("name", ["../outside.bin", "/etc/passwd", "a/../../b"])
def test_a_manifest_naming_a_path_outside_its_folder_is_refused(tmp_path, name):
    source = make_model(tmp_path / "usb", "sneaky")
    manifest = json.loads((source / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": "0" * 64, "bytes": 1}
    (source / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "outside.bin").write_bytes(b"x")
    with pytest.raises(InputError) as refused:
        ModelCatalog(tmp_path / "models").import_folder(source)
    assert refused.value.code == "model_folder_invalid" and "outside the model folder" in refused.value.message
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_import_refuses_what_is_not_a_model_folder(tmp_path):
    catalog = ModelCatalog(tmp_path / "models")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for source in (tmp_path / "empty", tmp_path / "file.txt", tmp_path / "absent"):
        with pytest.raises(InputError) as refused:
            catalog.import_folder(source)
        assert refused.value.code == "model_folder_invalid"
    with pytest.raises(InputError):
        catalog.import_folder(make_model(tmp_path / "usb", "fine"), name="../escape")


@pytest.mark.slow  # the tiny converted model: scripts/test.sh builds it for the whole suite, not --fast
def test_a_converted_cosyvoice2_model_carries_its_licence(tiny_cosyvoice_models):
    from cosyedge.export.cosyvoice.v2.convert import LICENCE

    info = ModelCatalog(tiny_cosyvoice_models).get("cosyvoice2-tiny")
    assert info.engine == "cosyvoice2" and (info.native_clone, info.native_instruct) == (True, True)
    assert info.licence == f"weights: {LICENCE['weights']}; code: {LICENCE['code']}"
    # The model's own files: what the manifest lists (the engine may keep a measurement beside them).
    folder = tiny_cosyvoice_models / "cosyvoice2-tiny"
    listed = json.loads((folder / "manifest.json").read_text())["files"]
    assert info.size_bytes == sum((folder / name).stat().st_size for name in listed) > 0


def test_models_converted_before_say_what_a_reconversion_brings(tmp_path):
    from cosyedge.catalog.models import CURRENT_STREAM_LAYOUT
    models = tmp_path / "models"
    for name, stream in (("no-stream", None), ("packed", {"encoder": "e.onnx", "kv_dtype": "float16"}),
                         ("current", {"encoder": "e.onnx", "kv_layout": CURRENT_STREAM_LAYOUT["cosyvoice2"]})):
        folder = make_model(models, name, engine="cosyvoice2")
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["config"] = {"flow": {"stream": stream} if stream else {}}
        (folder / "manifest.json").write_text(json.dumps(manifest))
    make_model(models, "kokoro-int8")
    by_id = {info.id: info for info in ModelCatalog(models).models()}
    assert by_id["no-stream"].reconvert.startswith("converted before streaming: it answers each sentence whole")
    assert "chunk-blocked cache" in by_id["packed"].reconvert and "bounded left context" in by_id["packed"].reconvert
    assert by_id["current"].reconvert == by_id["kokoro-int8"].reconvert == ""
    assert by_id["current"].as_dict()["reconvert"] is None and by_id["packed"].as_dict()["reconvert"]


def test_a_cosyvoice1_model_with_the_first_llm_step_graph_says_a_reconversion_brings_the_in_place_cache(tmp_path):
    """Every CosyVoice-300M conversion streams; one converted before the format-2 step graph (no
    ``config.llm.step_format``: tests/helpers/cosyvoice1_format1.py makes a real one) decodes slower."""
    models = tmp_path / "models"
    for name, llm in (("format1", {"layers": 2}), ("format2", {"layers": 2, "step_format": 2}), ("no-llm", None)):
        folder = make_model(models, name, engine="cosyvoice1")
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["config"] = {"llm": llm} if llm else {}
        (folder / "manifest.json").write_text(json.dumps(manifest))
    by_id = {info.id: info for info in ModelCatalog(models).models()}
    assert by_id["format1"].reconvert.startswith("converted with the first LLM step graph")
    assert "in-place LLM cache" in by_id["format1"].reconvert and "streaming" not in by_id["format1"].reconvert
    assert by_id["format2"].reconvert == by_id["no-llm"].reconvert == ""


def test_cosyvoice3_models_converted_before_streaming_say_a_reconversion_brings_it(tmp_path):
    from cosyedge.catalog.models import CURRENT_STREAM_LAYOUT
    models = tmp_path / "models"
    for name, stream in (("v3-old", None), ("v3-current", {"estimator": "e.onnx",
                                                           "kv_layout": CURRENT_STREAM_LAYOUT["cosyvoice3"]})):
        folder = make_model(models, name, engine="cosyvoice3")
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["config"] = {"flow": {"stream": stream} if stream else {}}
        (folder / "manifest.json").write_text(json.dumps(manifest))
    by_id = {info.id: info for info in ModelCatalog(models).models()}
    assert by_id["v3-old"].reconvert == ("converted before streaming: it answers each sentence whole. "
                                         "Converting it again brings hop-by-hop streaming")
    assert by_id["v3-current"].reconvert == ""


def test_the_catalogs_current_stream_layout_is_the_converters_and_the_engines():
    from cosyedge.catalog.models import CURRENT_STREAM_LAYOUT
    from cosyedge.engines.cosyvoice.common.flow import StreamLayout
    from cosyedge.export.cosyvoice.common.flow import KV_LAYOUT
    from cosyedge.export.cosyvoice.v3.convert import STREAM_LAYOUT
    assert CURRENT_STREAM_LAYOUT == {"cosyvoice2": KV_LAYOUT, "cosyvoice3": STREAM_LAYOUT}
    assert StreamLayout(kv_layout=KV_LAYOUT).blocked and StreamLayout(kv_layout=KV_LAYOUT).can_bound_context
