"""Self-test: each check passes on a good installation and fails, with a clear line, on a broken one."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cosyedge import cli
from cosyedge.ops import selftest
from cosyedge.config import Settings
from cosyedge.engines.base import AudioChunk, Capabilities
from cosyedge.catalog.manifest import write_manifest
from tests.helpers import REPO


class FakeEngine:
    name = "fake"
    model_id = "fake-1"

    def __init__(self, audio: np.ndarray | None = None, fail: Exception | None = None):
        self.capabilities = Capabilities(False, False, ("auto", "ja", "en"), 24000)
        self.audio = audio if audio is not None else \
            0.3 * np.sin(np.arange(24000, dtype=np.float32) * 0.05)
        self.fail = fail
        self.closed = False
        self.requests = []

    def presets(self):
        return ["female_1", "male_1"]

    def synthesize(self, text, voice, options, progress=None, cancelled=None):
        self.requests.append((text, voice, options.language))
        if self.fail:
            raise self.fail
        yield AudioChunk(self.audio, 24000, text, 0, 1)

    def close(self):
        self.closed = True


def make_model(models: Path, model_id: str = "kokoro-int8") -> Path:
    model_dir = models / model_id
    model_dir.mkdir(parents=True)
    (model_dir / "weights.onnx").write_bytes(bytes(range(256)) * 40)
    (model_dir / "vocab.json").write_text('{"a": 1}')
    write_manifest(model_dir, "kokoro", ["weights.onnx", "vocab.json"])
    return model_dir


@pytest.fixture
def box(tmp_path) -> Settings:
    make_model(tmp_path / "models")
    return Settings(root=tmp_path)


def by_name(results):
    return {r.name: r for r in results}


def test_good_installation_passes_every_check(box):
    engine = FakeEngine()
    results = selftest.run_checks(box, load=lambda s: engine)
    assert [r.name for r in results] == ["imports", "model kokoro-int8", "dir outputs", "dir prompts",
                                         "synthesis"]
    assert all(r.ok for r in results), [r.line() for r in results]
    assert engine.requests == [(selftest.SENTENCES["ja"], "female_1", "ja")]
    assert engine.closed
    assert "sha256 ok" in by_name(results)["model kokoro-int8"].detail
    assert not list((box.root / "outputs").iterdir())  # the probe file is cleaned up


def test_corrupt_model_file_fails_naming_the_file(box):
    weights = box.models_path / "kokoro-int8" / "weights.onnx"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF  # same size, different content: only the hash can tell
    weights.write_bytes(bytes(data))
    result = selftest.check_manifest(box.models_path / "kokoro-int8")
    assert not result.ok and "weights.onnx" in result.detail and "sha256" in result.detail


def test_every_model_directory_is_checked(box):
    bad = make_model(box.models_path, "cosyvoice2-int8")
    (bad / "vocab.json").unlink()
    results = by_name(selftest.check_models(box.models_path, "kokoro-int8"))
    assert results["model kokoro-int8"].ok
    assert not results["model cosyvoice2-int8"].ok
    assert "vocab.json is missing" in results["model cosyvoice2-int8"].detail


def test_missing_active_model_fails_with_the_fixing_command(tmp_path):
    results = selftest.check_models(tmp_path / "models", "kokoro-int8")
    assert len(results) == 1 and not results[0].ok
    assert "setup-model" in results[0].detail


def test_manifest_pointing_outside_the_model_dir_fails(box):
    model_dir = box.models_path / "kokoro-int8"
    (box.models_path / "secret").write_text("x")
    manifest = (model_dir / "manifest.json").read_text()
    (model_dir / "manifest.json").write_text(manifest.replace('"vocab.json"', '"../secret"'))
    result = selftest.check_manifest(model_dir)
    assert not result.ok and "outside" in result.detail


def test_unreadable_manifest_fails(box):
    (box.models_path / "kokoro-int8" / "manifest.json").write_text("{not json")
    result = selftest.check_manifest(box.models_path / "kokoro-int8")
    assert not result.ok and "unreadable" in result.detail


def test_unwritable_data_dir_fails(tmp_path):
    blocker = tmp_path / "outputs"
    blocker.write_text("a file where the directory should be")
    result = selftest.check_writable(blocker, "outputs")
    assert not result.ok and "not writable" in result.detail


def test_missing_import_fails_naming_the_module():
    result = selftest.check_imports(["json", "cosyedge_no_such_module"])
    assert not result.ok and "cosyedge_no_such_module" in result.detail
    assert selftest.check_imports(["json"]).ok


def test_the_import_check_follows_what_app_py_imports_at_start():
    """Derived from app.py, not listed by hand: the Wyoming server is imported inside app.py's
    functions at every start, the studio tabs inside build_ui's."""
    imports = selftest.startup_imports()
    assert {"cosyedge.web.wyoming_server", "cosyedge.web.wyoming_server:WyomingSettings", "uvicorn",
            "gradio", "cosyedge.web.ui", "cosyedge.web.voices_tab", "cosyedge.service.facade",
            "cosyedge.host.update_state", "cosyedge.engines.loader"} <= set(imports)
    assert not [t for t in imports if t.startswith(("cosyedge.export", "torch"))]  # never at run time
    assert selftest.check_imports().ok


def test_an_import_the_app_runs_at_start_that_fails_fails_the_check(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent("""\
        from typing import TYPE_CHECKING
        import json
        if TYPE_CHECKING:
            import cosyedge_only_for_type_checkers
        def main():
            from cosyedge.web import wyoming_server, no_such_module
            from cosyedge.config import Settings, no_such_setting
        """))
    imports = selftest.startup_imports(app)
    assert "cosyedge_only_for_type_checkers" not in imports
    assert {"json", "cosyedge.web.wyoming_server", "cosyedge.config:Settings",
            "cosyedge.config:no_such_setting"} <= set(imports)
    result = selftest.check_imports(app_file=app)
    assert not result.ok
    assert "cosyedge.web:no_such_module" in result.detail and "cosyedge.config:no_such_setting" in result.detail
    assert "cosyedge.config:Settings" not in result.detail


def test_an_app_py_that_does_not_compile_fails_the_check(tmp_path):
    app = tmp_path / "app.py"
    app.write_text("def main(:\n")
    result = selftest.check_imports(app_file=app)
    assert not result.ok and "SyntaxError" in result.detail and str(app) in result.detail


@pytest.mark.slow
def test_every_module_of_ours_that_a_real_start_loads_is_checked(tmp_path):
    """The real start, in a fresh process (app.main with uvicorn.run stubbed: the service, the
    janitor and the whole page are built): each module of ours it loaded is in the derived list."""
    import json
    import subprocess
    import sys

    script = textwrap.dedent("""\
        import json, sys, uvicorn
        uvicorn.run = lambda *args, **kwargs: None
        import app
        assert app.main(["--port", "17861"]) == 0
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("cosyedge"))))
        """)
    env = {**os.environ, "COSYEDGE_OUTPUTS_DIR": str(tmp_path / "outputs"),
           "COSYEDGE_PROMPTS_DIR": str(tmp_path / "prompts"), "GRADIO_TEMP_DIR": str(tmp_path / "gradio")}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    derived = {t.partition(":")[0] for t in selftest.startup_imports()}
    with_parents = {".".join(m.split(".")[:i]) for m in derived for i in range(1, m.count(".") + 2)}
    assert "cosyedge.web.voices_tab" in loaded  # the start really reached build_ui
    assert loaded - with_parents == set()


@pytest.mark.parametrize("engine,why", [
    (FakeEngine(audio=np.zeros(24000, dtype=np.float32)), "silent"),
    (FakeEngine(audio=np.full(24000, np.nan, dtype=np.float32)), "NaN"),
    (FakeEngine(audio=np.zeros(0, dtype=np.float32)), "no audio"),
    (FakeEngine(audio=0.5 * np.ones(24000 * 60, dtype=np.float32)), "60.00 s"),
    (FakeEngine(fail=RuntimeError("onnx session died")), "onnx session died"),
])
def test_bad_synthesis_fails(box, engine, why):
    result = selftest.check_synthesis(box, load=lambda s: engine)
    assert not result.ok and why in result.detail
    assert engine.closed


def test_engine_that_cannot_load_fails(box):
    from cosyedge.errors import ModelMissingError

    def load(settings):
        raise ModelMissingError("model 'kokoro-int8' not found")

    result = selftest.check_synthesis(box, load=load)
    assert not result.ok and "ModelMissingError" in result.detail


def test_command_prints_one_line_per_check_and_exits_zero_only_if_all_pass(box, monkeypatch, capsys):
    import cosyedge.engines.loader

    monkeypatch.setattr(cosyedge.engines.loader, "load_engine", lambda s: FakeEngine())
    args = ["selftest", "--models-dir", str(box.models_path), "--outputs-dir", str(box.outputs_path),
            "--prompts-dir", str(box.prompts_path)]
    assert cli.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all(line.startswith("PASS  ") for line in lines[:5])
    assert lines[-1] == "selftest: all passed"

    monkeypatch.setattr(cosyedge.engines.loader, "load_engine",
                        lambda s: FakeEngine(audio=np.zeros(100, dtype=np.float32)))
    assert cli.main(args) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[4].startswith("FAIL  synthesis:")
    assert lines[-1] == "selftest: FAILED (synthesis)"

    assert cli.main(args[:1] + ["--no-synthesis"] + args[1:]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5


@pytest.mark.slow
def test_selftest_command_on_the_real_embedded_model(tmp_path, kokoro_models_dir):
    """The real thing, as the OTA update runs it: a fresh process, the assembled Kokoro model (a
    copy: the test damages it)."""
    import shutil
    import subprocess
    import sys

    from cosyedge.engines.kokoro import model_files
    from cosyedge.export.kokoro import assembly

    assembled = assembly.assemble(kokoro_models_dir)  # up to date with this code (kept when it is)
    model_dir = Path(shutil.copytree(assembled, tmp_path / "models" / assembled.name))
    cmd = [sys.executable, "-m", "cosyedge", "selftest", "--models-dir", str(tmp_path / "models"),
           "--outputs-dir", str(tmp_path / "outputs"), "--prompts-dir", str(tmp_path / "prompts")]
    root = REPO
    good = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    lines = good.stdout.splitlines()
    assert good.returncode == 0, good.stdout + good.stderr
    assert [line.split(":")[0] for line in lines[:5]] == [
        "PASS  imports", "PASS  model kokoro-int8", "PASS  dir outputs", "PASS  dir prompts",
        "PASS  synthesis"]
    assert lines[-1] == "selftest: all passed"

    vocab = model_dir / model_files.VOCAB_NAME
    vocab.write_text(vocab.read_text().replace("1", "2", 1))  # same size, different bytes
    bad = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1
    assert any(line.startswith("FAIL  model kokoro-int8:") and "vocab.json" in line
               for line in bad.stdout.splitlines())
