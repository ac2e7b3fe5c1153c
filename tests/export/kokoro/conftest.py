"""Fixtures for the Kokoro setup tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def assembled(kokoro_models_dir) -> Path:
    """The session's real model directory, brought up to date by the (idempotent) setup step."""
    from cosyedge.export.kokoro import assembly

    return assembly.assemble(kokoro_models_dir)
