"""The embedded model directory's names as the engine reads them (engines/kokoro/model_files.py);
assembling it is tested in tests/export/kokoro/test_assembly.py."""

import json

import pytest

from cosyedge.engines.kokoro import model_files
from cosyedge.errors import ModelMissingError
from cosyedge.catalog.manifest import read_manifest


def test_missing_model_names_the_command(tmp_path):
    with pytest.raises(ModelMissingError, match="setup-model"):
        read_manifest(tmp_path / "nothing", model_files.FIX_HINT)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text(json.dumps({"engine": "kokoro"}))
    with pytest.raises(ModelMissingError, match="unreadable"):
        read_manifest(tmp_path / "bad", "hint")
