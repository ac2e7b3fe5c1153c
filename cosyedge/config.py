"""Settings: one frozen dataclass, read from ``COSYEDGE_*`` environment variables and CLI flags.

Precedence: defaults < environment < command-line flags. ``Settings.validate()`` runs at start and
raises :class:`SettingsError` with a message that says which variable or flag to fix.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

logger = logging.getLogger(__name__)

ENV_PREFIX = "COSYEDGE_"
DEFAULT_MODEL = "kokoro-int8"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class SettingsError(ValueError):
    """A setting is invalid; the message names the variable/flag and a valid example."""


@dataclass(frozen=True)
class Settings:
    """Everything configurable about a cosyedge process."""

    host: str = "127.0.0.1"
    port: int = 7860
    root: Path = field(default_factory=lambda: Path.cwd())
    models_dir: Path | None = None
    prompts_dir: Path | None = None
    outputs_dir: Path | None = None
    model: str = DEFAULT_MODEL
    concurrency: int = 2
    queue_size: int = 8
    onnx_threads: int = 0  # 0 = number of CPU cores
    thread_calibration: bool = True  # CosyVoice: measure the LLM / flow thread split once per host and model
    # CosyVoice: a streamed sentence's flow cache may grow to this much (0 = no limit); past it the
    # sentence is finished whole. ~2.2 MiB per mel frame at 10 steps: 1536 holds a 3 s prompt and
    # ~10.5 s of speech (docs/bench-log/cosyvoice.md, "The streamed flow's memory budget").
    stream_cache_max_mb: float = 1536.0
    # CosyVoice: the quality mode of requests that name none (REST, OpenAI and Wyoming clients alike);
    # the modes are defined in engines/cosyvoice/common/quality.py, checked when the service starts.
    quality: str = "exact"
    # The speed-mode check (service.mode_check_runner) starts by itself on an idle box for a served
    # model with speed modes and no current modes.json (a model just imported or reconverted).
    auto_mode_check: bool = True
    log_level: str = "INFO"
    idle_unload_minutes: float = 15.0
    asr_idle_seconds: float = 120.0  # the speech recognizer (prompt transcripts) leaves memory this long after use
    max_text_chars: int = 5000
    max_upload_mb: float = 20.0
    auth: str | None = None  # "user:password"
    insecure_no_auth: bool = False
    device: str = "edge"  # accepted for the seed's `--device edge`; only CPU exists
    quantized: bool = True  # accepted for the seed's `--quantized`; models are int8 already
    # Janitor: what outputs/ may hold (0 = no limit for each) and how often it is swept.
    janitor_max_age_hours: float = 24.0
    janitor_max_total_mb: float = 1024.0
    janitor_max_files: int = 500
    janitor_interval_minutes: float = 10.0
    # Long lessons (cosyedge.service.lessons) and disk safety (cosyedge.host.diskspace, the janitor's upload cap).
    max_lesson_chars: int = 60000
    min_free_disk_mb: float = 256.0  # under this, new uploads and jobs are refused (0 = never)
    upload_cache_max_mb: float = 512.0  # the page's upload cache, swept oldest first (0 = no cap)
    # The saved-voice library (prompts/library/): new saves and imports are refused past either bound,
    # nothing saved is ever removed to make room (0 = no bound). A voice is ~0.5-2 MB (a 10 s prompt).
    voice_library_max_voices: int = 100
    voice_library_max_mb: float = 256.0
    # Thermal governor thresholds (°C) and how far below a threshold it must cool to step down.
    thermal_warm_c: float = 70.0
    thermal_hot_c: float = 80.0
    thermal_critical_c: float = 90.0
    thermal_hysteresis_c: float = 5.0

    # Resolved directories (models/prompts/outputs default to folders under root).
    @property
    def models_path(self) -> Path:
        return Path(self.models_dir) if self.models_dir else Path(self.root) / "models"

    @property
    def prompts_path(self) -> Path:
        return Path(self.prompts_dir) if self.prompts_dir else Path(self.root) / "prompts"

    @property
    def outputs_path(self) -> Path:
        return Path(self.outputs_dir) if self.outputs_dir else Path(self.root) / "outputs"

    @property
    def model_path(self) -> Path:
        return self.models_path / self.model

    @property
    def threads(self) -> int:
        """ONNX intra-op threads actually used (auto: the CPUs this process may use, cosyedge.host.cpus)."""
        from cosyedge.host.cpus import usable_cpus

        return self.onnx_threads or usable_cpus()

    def validate(self) -> "Settings":
        """Check every field; return self so callers can chain."""
        def fail(name: str, why: str, flag: bool = True) -> None:
            # a flag is named only where app.py and the CLI both take it (there is no --auth)
            shown = flag and name in shared_flags()
            where = f"{ENV_PREFIX}{name.upper()}" + (f" or --{name.replace('_', '-')}" if shown else "")
            raise SettingsError(f"{name}: {why} (set {where})")

        if not 1 <= self.port <= 65535:
            fail("port", f"{self.port} is not a TCP port (1-65535)")
        if not 1 <= self.concurrency <= 8:
            fail("concurrency", f"{self.concurrency} must be between 1 and 8")
        if not 0 <= self.queue_size <= 1000:
            fail("queue_size", f"{self.queue_size} must be between 0 and 1000")
        if not 0 <= self.onnx_threads <= 64:
            fail("onnx_threads", f"{self.onnx_threads} must be 0 (auto) or 1-64")
        if self.log_level.upper() not in LOG_LEVELS:
            fail("log_level", f"{self.log_level!r} must be one of {', '.join(LOG_LEVELS)}")
        if self.idle_unload_minutes < 0:
            fail("idle_unload_minutes", "must be >= 0 (0 = never unload)")
        if self.asr_idle_seconds < 0:
            fail("asr_idle_seconds", "must be >= 0 (0 = keep the speech recognizer loaded)", flag=False)
        if self.stream_cache_max_mb < 0:
            fail("stream_cache_max_mb", f"{self.stream_cache_max_mb} must be >= 0 (0 = no limit)", flag=False)
        if not 1 <= self.max_text_chars <= 1_000_000:
            fail("max_text_chars", f"{self.max_text_chars} must be between 1 and 1000000")
        if not 0 < self.max_upload_mb <= 1024:
            fail("max_upload_mb", f"{self.max_upload_mb} must be in (0, 1024]")
        if self.auth is not None and (":" not in self.auth or self.auth.startswith(":")
                                      or self.auth.endswith(":")):
            fail("auth", "must look like user:password")
        if self.device not in ("edge", "cpu"):
            fail("device", f"{self.device!r}: only 'edge' (= cpu) is supported; there is no GPU path")
        if self.janitor_max_age_hours < 0:
            fail("janitor_max_age_hours", f"{self.janitor_max_age_hours} must be >= 0 (0 = no age limit)",
                 flag=False)
        if self.janitor_max_total_mb < 0:
            fail("janitor_max_total_mb", f"{self.janitor_max_total_mb} must be >= 0 (0 = no size limit)",
                 flag=False)
        if self.janitor_max_files < 0:
            fail("janitor_max_files", f"{self.janitor_max_files} must be >= 0 (0 = no count limit)",
                 flag=False)
        if not 0.1 <= self.janitor_interval_minutes <= 1440:
            fail("janitor_interval_minutes", f"{self.janitor_interval_minutes} must be between 0.1 and 1440",
                 flag=False)
        if not 1 <= self.max_lesson_chars <= 1_000_000:
            fail("max_lesson_chars", f"{self.max_lesson_chars} must be between 1 and 1000000", flag=False)
        if self.min_free_disk_mb < 0:
            fail("min_free_disk_mb", f"{self.min_free_disk_mb} must be >= 0 (0 = never refuse)", flag=False)
        if self.upload_cache_max_mb < 0:
            fail("upload_cache_max_mb", f"{self.upload_cache_max_mb} must be >= 0 (0 = no cap)", flag=False)
        if self.voice_library_max_voices < 0:
            fail("voice_library_max_voices", f"{self.voice_library_max_voices} must be >= 0 (0 = no bound)",
                 flag=False)
        if self.voice_library_max_mb < 0:
            fail("voice_library_max_mb", f"{self.voice_library_max_mb} must be >= 0 (0 = no bound)", flag=False)
        if not 0 < self.thermal_warm_c < self.thermal_hot_c < self.thermal_critical_c <= 150:
            fail("thermal_warm_c", f"thresholds must rise: 0 < warm ({self.thermal_warm_c}) < hot "
                 f"({self.thermal_hot_c}) < critical ({self.thermal_critical_c}) <= 150, e.g. 70/80/90",
                 flag=False)
        if not 0 <= self.thermal_hysteresis_c <= 20:
            fail("thermal_hysteresis_c", f"{self.thermal_hysteresis_c} must be between 0 and 20",
                 flag=False)
        if not self.model or "/" in self.model or self.model.startswith("."):
            fail("model", f"{self.model!r} must be a directory name under models/, e.g. kokoro-int8")
        return self


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Settings)}


def _convert(name: str, raw: str) -> object:
    """Turn an env-var string into the field's type, with an error naming the variable."""
    kind = _FIELD_TYPES[name]
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            value = float(raw)
            if not math.isfinite(value):  # "nan" and "inf" parse, then slip past every range check
                raise ValueError(raw)
            return value
        if kind == "bool":
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if "Path" in kind:
            return Path(raw)
        return raw
    except ValueError:
        raise SettingsError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind}") from None


def from_env(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Build Settings from ``COSYEDGE_*`` variables, then apply explicit overrides (non-None)."""
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name in _FIELD_TYPES:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = _convert(name, raw)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Settings(**values).validate()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags shared by app.py and the CLI; every default is None (= env or default)."""
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 7860)")
    parser.add_argument("--model", help="model id under models/ (default kokoro-int8)")
    parser.add_argument("--models-dir", dest="models_dir", type=Path)
    parser.add_argument("--prompts-dir", dest="prompts_dir", type=Path)
    parser.add_argument("--outputs-dir", dest="outputs_dir", type=Path)
    parser.add_argument("--concurrency", type=int, help="jobs synthesizing at once (default 2)")
    parser.add_argument("--queue-size", dest="queue_size", type=int, help="waiting jobs (default 8)")
    parser.add_argument("--onnx-threads", dest="onnx_threads", type=int, help="0 = all cores")
    parser.add_argument("--log-level", dest="log_level")
    parser.add_argument("--idle-unload-minutes", dest="idle_unload_minutes", type=float)
    parser.add_argument("--device", help="accepted for compatibility: only 'edge' (CPU)")
    parser.add_argument("--quantized", action="store_true", default=None,
                        help="accepted for compatibility: models are int8 already")


def shared_flags() -> frozenset[str]:
    """The settings that :func:`add_arguments` gives a flag (by field name)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return frozenset(vars(parser.parse_args([])))


def from_args(args: argparse.Namespace | Sequence[str] | None = None,
              environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from parsed (or raw) CLI arguments on top of the environment."""
    if not isinstance(args, argparse.Namespace):
        parser = argparse.ArgumentParser(add_help=False)
        add_arguments(parser)
        args, _ = parser.parse_known_args(args)
    names = set(_FIELD_TYPES)
    return from_env(environ, **{k: v for k, v in vars(args).items() if k in names})
