"""Test helpers shared by every test folder: fake and tiny engines, the CosyVoice reference builders,
live-server wrappers. ``REPO`` is the checkout's root."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
