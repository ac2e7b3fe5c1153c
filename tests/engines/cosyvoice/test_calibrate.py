"""The host's own thread costs: measured once per host and model, stored, and what the split uses."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.common import calibrate
from cosyedge.engines.cosyvoice.common.calibrate import host_costs, measure_thread_costs, thread_counts
from cosyedge.engines.cosyvoice.common.threads import COSTS_FILE, ThreadCosts, host_key, plan_threads


class FakeLM:
    """An LLM whose decode step takes ``step_s`` seconds (the prefill is free)."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s

    def generate(self, text, choose, min_ratio, max_ratio, on_step):  # noqa: ANN001
        for _ in range(int(len(text) * max_ratio)):
            time.sleep(self.step_s)
            on_step(None)
            choose(None, [], False)


class FakeStream:
    lookahead = 3

    def __init__(self, token_s: float) -> None:
        self.token_s = token_s
        self.tokens_rendered = -self.lookahead  # every token pushed is rendered once its look-ahead is in

    def push(self, tokens) -> list:  # noqa: ANN001
        time.sleep(self.token_s * len(tokens))
        self.tokens_rendered += len(tokens)
        return [np.zeros(1)]


class FakeToken2Wav:
    can_stream = True

    def __init__(self, token_s: float) -> None:
        self.token_s = token_s

    def stream(self, *args, **kwargs) -> FakeStream:  # noqa: ANN002, ANN003
        return FakeStream(self.token_s)


#: A host where decode does not gain from threads and rendering does (time per token, seconds).
DECODE_S = {1: 0.002, 2: 0.002}
RENDER_S = {1: 0.006, 2: 0.003}


def fakes(opened: list[int]):
    def open_lm(threads: int) -> FakeLM:
        opened.append(threads)
        return FakeLM(DECODE_S[threads])

    return open_lm, lambda threads: FakeToken2Wav(RENDER_S[threads])


def test_thread_counts_cover_one_two_and_all():
    assert thread_counts(1) == [1]
    assert thread_counts(2) == [1, 2]
    assert thread_counts(6) == [1, 2, 4, 6]


def test_measured_costs_follow_the_host():
    costs = measure_thread_costs(*fakes([]), counts=[1, 2])
    for table, truth in ((costs.decode, DECODE_S), (costs.render, RENDER_S)):
        for threads, seconds in truth.items():
            assert seconds * 0.9 < table[threads] < seconds * 2.5, (table, truth)
    assert costs.render[2] < 0.8 * costs.render[1]


def test_host_costs_measure_once_store_by_host_and_keep_other_hosts(tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "thread_counts", lambda cpus: [1, 2])
    other = {"decode": {"1": 0.5}, "render": {"1": 0.5}}
    (tmp_path / COSTS_FILE).write_text(json.dumps({"hosts": {"another CPU / 8 CPUs / onnxruntime 0": other}}))
    assert not ThreadCosts.load(tmp_path).measured  # another host's figures are not this host's
    opened: list[int] = []
    first = host_costs(tmp_path, *fakes(opened))
    assert opened == [1, 2] and first.render[2] < first.render[1]
    stored = json.loads((tmp_path / COSTS_FILE).read_text())["hosts"]
    assert stored["another CPU / 8 CPUs / onnxruntime 0"] == other
    assert set(stored[host_key()]["decode"]) == {"1", "2"} and "measured" in stored[host_key()]
    again = host_costs(tmp_path, *fakes(opened))
    assert opened == [1, 2], "measured again although this host's costs were stored"
    assert again.decode == first.decode and again.measured
    assert plan_threads(2, again).render == 2


def test_host_costs_without_measuring_or_with_a_failure_give_the_builtin_figures(tmp_path):
    opened: list[int] = []
    assert host_costs(tmp_path, *fakes(opened), measure=False) == ThreadCosts()
    assert opened == [] and not (tmp_path / COSTS_FILE).exists()

    def broken(threads: int):
        raise RuntimeError("no such session")

    assert host_costs(tmp_path, broken, broken) == ThreadCosts()


def test_a_read_only_model_dir_still_gets_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setattr(calibrate, "thread_counts", lambda cpus: [1, 2])

    def read_only(*args, **kwargs):  # noqa: ANN002, ANN003
        raise PermissionError("read-only file system")

    monkeypatch.setattr(ThreadCosts, "save", read_only)
    costs = host_costs(tmp_path, *fakes([]))
    assert costs.measured and set(costs.render) == {1, 2}
    assert not (tmp_path / COSTS_FILE).exists()


@pytest.mark.slow  # loads the tiny model twice and measures it (~5 s)
def test_the_engine_measures_a_new_host_once(tiny_cosyvoice_models, tmp_path, caplog):
    from cosyedge.config import Settings
    from cosyedge.engines.loader import load_engine
    from tests.helpers.tiny_models import MODEL_ID

    models = tmp_path / "models"
    model = models / MODEL_ID
    model.mkdir(parents=True)
    for item in (tiny_cosyvoice_models / MODEL_ID).iterdir():
        if item.name != COSTS_FILE:
            (model / item.name).symlink_to(item)
    settings = Settings(models_dir=models, model=MODEL_ID, onnx_threads=2)
    with caplog.at_level("INFO", logger="cosyedge.engines.cosyvoice"):
        load_engine(settings).close()
    assert "measuring this host's" in caplog.text
    entry = json.loads((model / COSTS_FILE).read_text())["hosts"][host_key()]
    assert set(entry["decode"]) == set(entry["render"]) == {str(n) for n in thread_counts(_cpus())}
    assert all(v > 0 for v in entry["render"].values())
    caplog.clear()
    with caplog.at_level("INFO", logger="cosyedge.engines.cosyvoice"):
        load_engine(settings).close()
    assert "measuring this host's" not in caplog.text and str(model / COSTS_FILE) in caplog.text


def _cpus() -> int:
    from cosyedge.host.cpus import usable_cpus

    return usable_cpus()
