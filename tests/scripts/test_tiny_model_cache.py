"""The tiny CosyVoice model cache that scripts/test.sh builds in .venv-ref for .venv tests: its stamp
decides reuse, a stale or missing cache fails with the build command, and the script builds it first."""

from __future__ import annotations

import json
import types

import pytest

from tests.helpers import REPO, tiny_models

OWN_SOURCE = "tests/helpers/tiny_models.py"


def fake_cache(out, sources=(OWN_SOURCE,)):
    (tiny_models.models_dir(out) / tiny_models.MODEL_ID).mkdir(parents=True)
    (tiny_models.models_dir(out) / tiny_models.MODEL_ID / "manifest.json").write_text("{}")
    stamp = tiny_models.stamp(sources)
    (out / tiny_models.STAMP_NAME).write_text(json.dumps(stamp))
    return stamp


def test_a_missing_cache_fails_with_the_command_that_builds_it(tmp_path):
    with pytest.raises(tiny_models.TinyModelsMissing) as info:
        tiny_models.require(tmp_path)
    assert f"-m tests.helpers.cosyvoice_tiny --out {tmp_path}" in str(info.value)
    assert "test-artifacts/tiny-models" in tiny_models.BUILD_COMMAND


def test_a_cache_is_reused_while_its_sources_are_unchanged(tmp_path):
    fake_cache(tmp_path)
    assert tiny_models.stale_reason(tmp_path) is None
    assert tiny_models.require(tmp_path) == tmp_path / "models"


def test_a_changed_source_or_reference_makes_the_cache_stale(tmp_path):
    stamp = fake_cache(tmp_path)
    stamp["sources"][OWN_SOURCE] = "0" * 64   # as if the file had changed since the build
    (tmp_path / tiny_models.STAMP_NAME).write_text(json.dumps(stamp))
    assert OWN_SOURCE in tiny_models.stale_reason(tmp_path)
    with pytest.raises(tiny_models.TinyModelsMissing, match="changed"):
        tiny_models.require(tmp_path)
    stamp = tiny_models.stamp([OWN_SOURCE])
    stamp["reference"] = {"torch": "0.0"}
    (tmp_path / tiny_models.STAMP_NAME).write_text(json.dumps(stamp))
    assert tiny_models.stale_reason(tmp_path) is None   # .venv cannot see the reference's versions
    assert "reference packages" in tiny_models.stale_reason(tmp_path, check_versions=True)


def test_the_stamp_lists_the_repositorys_own_modules_only():
    modules = [types.SimpleNamespace(__file__=str(REPO / "cosyedge" / "errors.py")),
               types.SimpleNamespace(__file__=str(REPO / "tests" / "helpers" / "cosyvoice_tiny.py")),
               types.SimpleNamespace(__file__="/usr/lib/python3/json/__init__.py"),
               types.SimpleNamespace(__file__=None), types.SimpleNamespace()]
    assert tiny_models.repo_sources(modules) == ["cosyedge/errors.py", "tests/helpers/cosyvoice_tiny.py"]


def test_scripts_test_sh_builds_the_cache_before_the_venv_run():
    lines = (REPO / "scripts" / "test.sh").read_text().splitlines()
    build = next(i for i, line in enumerate(lines) if line.strip() == tiny_models.BUILD_COMMAND)
    venv_runs = [i for i, line in enumerate(lines) if line.strip().startswith("run_pytest .venv ")
                 and "not slow" not in line]
    assert venv_runs and all(build < i for i in venv_runs)
