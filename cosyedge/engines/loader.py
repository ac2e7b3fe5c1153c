"""Which engine a model directory needs, and loading it: ``load_engine(settings)`` reads the
manifest's model family and builds that engine (what each engine does natively before it loads is
the catalog's table, :mod:`cosyedge.catalog.abilities`). Kept out of the package ``__init__`` so that
the engines, which import ``cosyedge.engines.base``, do not import the module that imports them."""

from __future__ import annotations

import logging

from cosyedge.config import Settings
from cosyedge.engines.base import Engine
from cosyedge.errors import CosyedgeError, ModelMissingError
from cosyedge.catalog.manifest import manifest_identity, read_manifest, verify_files

logger = logging.getLogger(__name__)


def load_engine(settings: Settings) -> Engine:
    """Load the engine of the model family that ``models/<settings.model>/manifest.json`` names
    (heavy: sessions, weights)."""
    hint = ("run `python -m cosyedge setup-model`" if settings.model == "kokoro-int8"
            else f"convert a checkpoint into {settings.model_path} with `python -m cosyedge convert`")
    if not (settings.model_path / "manifest.json").is_file():  # a typo in --model / COSYEDGE_MODEL?
        present = sorted(path.parent.name for path in settings.models_path.glob("*/manifest.json"))
        if present:
            hint += f", or pick a model that is there: {', '.join(present)} (--model or COSYEDGE_MODEL)"
    manifest = read_manifest(settings.model_path, hint)
    identity = manifest_identity(manifest, settings.model_path)
    if identity.known and identity.family == "kokoro":
        from cosyedge.engines.kokoro.engine import KokoroEngine as engine_class
    elif identity.known and identity.family == "cosyvoice":
        from cosyedge.engines.cosyvoice.versions import VERSIONS, engine_class as cosyvoice_engine

        # a version with no registry line goes to the CosyVoice2-form engine, whose loader refuses it
        engine_class = cosyvoice_engine(identity.version if identity.version in VERSIONS else 2)
    else:
        raise ModelMissingError(f"{settings.model_path}/manifest.json names unknown engine {identity.engine!r}")
    try:
        return engine_class.load(settings.model_path, settings)
    except CosyedgeError:
        raise
    except Exception:
        # Loading checks sizes only; a same-size damaged file fails inside onnxruntime or numpy with
        # an error that names neither the file nor the fix. Hashing (only now) finds it.
        verify_files(settings.model_path, manifest, hint)
        raise
