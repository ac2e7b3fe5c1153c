"""Test helpers shared by every test folder: fake and tiny engines, the CosyVoice reference builders
and the tiny-model cache, live-server wrappers, waiting on state. ``REPO`` is the checkout's root."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
