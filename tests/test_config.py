"""Settings: env + flags precedence and validation messages that name the fix."""

from pathlib import Path

import pytest

from cosyedge import config
from cosyedge.config import SettingsError


def test_defaults():
    s = config.from_env({})
    assert (s.host, s.port, s.concurrency, s.queue_size, s.model) == ("127.0.0.1", 7860, 2, 8, "kokoro-int8")
    assert s.outputs_path == Path.cwd() / "outputs"


def test_env_then_flags_override():
    env = {"COSYEDGE_PORT": "8000", "COSYEDGE_CONCURRENCY": "1", "COSYEDGE_OUTPUTS_DIR": "/tmp/o"}
    s = config.from_args(["--port", "9000"], environ=env)
    assert s.port == 9000 and s.concurrency == 1 and s.outputs_path == Path("/tmp/o")


def test_seed_flags_are_accepted():
    s = config.from_args(["--device", "edge", "--quantized"], environ={})
    assert s.device == "edge" and s.quantized is True


@pytest.mark.parametrize("env, needle", [
    ({"COSYEDGE_PORT": "http"}, "COSYEDGE_PORT"),
    ({"COSYEDGE_PORT": "70000"}, "port"),
    ({"COSYEDGE_CONCURRENCY": "0"}, "concurrency"),
    ({"COSYEDGE_LOG_LEVEL": "LOUD"}, "log_level"),
    ({"COSYEDGE_AUTH": "nopassword"}, "user:password"),
    ({"COSYEDGE_DEVICE": "cuda"}, "no GPU"),
    ({"COSYEDGE_MODEL": "../etc"}, "models/"),
    ({"COSYEDGE_INSECURE_NO_AUTH": "maybe"}, "COSYEDGE_INSECURE_NO_AUTH"),
    ({"COSYEDGE_JANITOR_MAX_TOTAL_MB": "inf"}, "COSYEDGE_JANITOR_MAX_TOTAL_MB"),
    ({"COSYEDGE_JANITOR_MAX_TOTAL_MB": "nan"}, "COSYEDGE_JANITOR_MAX_TOTAL_MB"),
    ({"COSYEDGE_JANITOR_MAX_AGE_HOURS": "NaN"}, "COSYEDGE_JANITOR_MAX_AGE_HOURS"),
    ({"COSYEDGE_IDLE_UNLOAD_MINUTES": "nan"}, "COSYEDGE_IDLE_UNLOAD_MINUTES"),
    ({"COSYEDGE_STREAM_CACHE_MAX_MB": "-1"}, "COSYEDGE_STREAM_CACHE_MAX_MB"),
    ({"COSYEDGE_STREAM_CACHE_MAX_MB": "nan"}, "COSYEDGE_STREAM_CACHE_MAX_MB"),
])
def test_invalid_settings_name_the_problem(env, needle):
    with pytest.raises(SettingsError, match=needle):
        config.from_env(env)


def test_the_stream_cache_budget_is_a_setting():
    assert config.from_env({}).stream_cache_max_mb == 1536.0
    assert config.from_env({"COSYEDGE_STREAM_CACHE_MAX_MB": "256"}).stream_cache_max_mb == 256.0


def test_a_refused_setting_names_only_flags_the_app_takes():
    """``auth`` has no flag (COSYEDGE_AUTH only): its refusal named an ``--auth`` that app.py refused."""
    import pytest

    from app import parse_args
    from cosyedge.config import Settings, SettingsError, shared_flags

    with pytest.raises(SettingsError) as refused:
        Settings(auth="no-colon").validate()
    assert "COSYEDGE_AUTH" in str(refused.value) and "--auth" not in str(refused.value)
    with pytest.raises(SettingsError, match="COSYEDGE_PORT or --port"):
        Settings(port=0).validate()
    for field in shared_flags():  # every flag a refusal may name is one app.py takes
        flag = f"--{field.replace('_', '-')}"
        value = [] if field == "quantized" else ["1"]
        assert getattr(parse_args([flag, *value]), field) is not None, flag
