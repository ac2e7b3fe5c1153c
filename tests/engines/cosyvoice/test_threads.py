"""The CPU count (affinity + cgroup quota) and the LLM / flow + HiFT thread split."""

from __future__ import annotations

import json
import os

from cosyedge.host.cpus import cgroup_cpu_limit, usable_cpus
from cosyedge.engines.cosyvoice.common.threads import ThreadCosts, plan_threads


def test_cgroup_v2_and_v1_quotas(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    assert usable_cpus(tmp_path) == min(2, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_limit(v1) == 1.0 and usable_cpus(v1) == 1


def test_usable_cpus_follows_the_affinity_mask(tmp_path):
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mask)})
        assert usable_cpus(tmp_path) == 1
    finally:
        os.sched_setaffinity(0, mask)


def test_split_on_the_measured_intel_figures():
    # decode gains from a second thread there, rendering gains more: 1 + 2 beats 1 + 1 and 2 + 2
    plan = plan_threads(2)
    assert (plan.lm, plan.render) == (1, 2)
    assert plan_threads(1).lm == plan_threads(1).render == 1     # the governor's single thread
    four = plan_threads(4)
    assert four.lm + four.render <= 5 and four.seconds_per_token < plan.seconds_per_token


def test_split_follows_the_costs():
    # a host where decode is memory-bound (no gain from threads) and rendering is slow
    costs = ThreadCosts(decode={1: 0.03, 2: 0.03}, render={1: 0.2, 2: 0.1, 3: 0.067})
    plan = plan_threads(4, costs)
    assert plan.lm == 1 and plan.render >= 3


def test_costs_file_in_the_model_dir(tmp_path):
    (tmp_path / "thread_costs.json").write_text(json.dumps({"decode": {"1": 0.01}, "render": {"1": 0.5}}))
    costs = ThreadCosts.load(tmp_path)
    assert costs.decode == {1: 0.01} and str(tmp_path) in costs.source
    assert ThreadCosts.load(tmp_path / "missing").source.startswith("Intel")
    assert plan_threads(2, costs).render == 2  # rendering is the bottleneck: it gets both CPUs


def test_a_tie_goes_to_a_split_within_the_cpus_then_to_the_faster_one_not_streamed():
    # measured on the Intel host (bench/cosyvoice_first_audio.py, 2026-12-02): streamed, 1 + 1 and
    # 2 + 1 are both bound by rendering at 1 thread; 2 + 1 asks for 3 threads on 2 CPUs and ran slower
    measured = ThreadCosts(decode={1: 0.0447, 2: 0.0262}, render={1: 0.0735, 2: 0.0599})
    plan = plan_threads(2, measured)
    assert (plan.lm, plan.render) == (1, 1)
    assert plan.seconds_per_token_not_streamed == 0.0447 + 0.0735 and "not streamed" in plan.describe()
    # rendering that gains nothing from threads: every split within 3 CPUs streams alike, and the one
    # with the faster LLM serves a request that is not streamed best
    flat = ThreadCosts(decode={1: 0.04, 2: 0.02, 3: 0.02}, render={1: 0.06, 2: 0.06, 3: 0.06})
    plan = plan_threads(3, flat)
    assert (plan.lm, plan.render) == (2, 1)
