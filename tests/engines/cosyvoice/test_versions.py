"""The CosyVoice version registries (engines/cosyvoice/versions.py, export/cosyvoice/versions.py): every
version's description has the registry's interface, the shared parts name no version folder, and the
converter command's families are the converter registry's."""

from __future__ import annotations

import ast
import inspect
import re

import pytest

from cosyedge.commands import convert as convert_command
from cosyedge.engines.cosyvoice import versions
from cosyedge.errors import CosyedgeError
from cosyedge.export.cosyvoice import versions as export_versions
from tests.helpers import REPO


def _members(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {name for name, value in vars(protocol).items() if inspect.isfunction(value)}
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("version", sorted(versions.VERSIONS))
def test_every_version_description_has_the_interface_its_engine_reads(version):
    described = versions.description(version)
    engine = versions.engine_class(version)
    needed = _members(versions.VersionDescription)
    if engine.__module__.endswith(".common.engine"):  # the CosyVoice2-form engine reads the rest too
        needed |= _members(versions.Cosy2FormDescription)
    assert described.VERSION == version
    assert sorted(name for name in needed if not hasattr(described, name)) == []
    assert described.LANGUAGES[0] == "auto"


def test_the_registry_names_each_version_its_engine():
    from cosyedge.engines.cosyvoice.common.engine import CosyVoiceEngine
    from cosyedge.engines.cosyvoice.v1.engine import CosyVoice1Engine

    assert versions.engine_class(1) is CosyVoice1Engine
    assert versions.engine_class(2) is versions.engine_class(3) is CosyVoiceEngine
    with pytest.raises(CosyedgeError) as err:
        versions.description(9)
    assert err.value.code == "model_version_unknown"


def test_the_shared_parts_import_no_version_folder():
    """common/ (run time and build time) reaches a version only through its registry."""
    for root in ("cosyedge/engines/cosyvoice/common", "cosyedge/export/cosyvoice/common"):
        for path in sorted((REPO / root).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                crossing = [n for n in names if re.search(r"\.cosyvoice\.v\d", n)]
                assert crossing == [], f"{path.relative_to(REPO)} imports {crossing}"


def test_the_convert_command_offers_the_converter_registry_families():
    assert set(convert_command.FAMILIES) == set(export_versions.CONVERTERS)
    assert {c.version for c in export_versions.CONVERTERS.values()} == set(versions.VERSIONS)
