"""RAS sampling: the rules one by one, and the distribution it draws compared with upstream's sampler."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.common.sampling import RasSampler, greedy

pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


EOS = 6561


def logp_of(probs: dict[int, float], size: int = 6564) -> np.ndarray:
    p = np.full(size, 1e-12)
    for k, v in probs.items():
        p[k] = v
    return np.log(p / p.sum()).astype(np.float32)


def draws(sampler, logp, decoded=(), n=3000, ignore_eos=False) -> Counter:
    return Counter(sampler(logp, list(decoded), ignore_eos) for _ in range(n))


def test_nucleus_keeps_tokens_until_top_p():
    lp = logp_of({10: 0.5, 11: 0.2, 12: 0.15, 13: 0.1, 14: 0.05})
    seen = draws(RasSampler(EOS, seed=0), lp)
    assert set(seen) == {10, 11, 12}  # mass before 13 is 0.85 >= 0.8
    assert seen[10] / 3000 == pytest.approx(0.5 / 0.85, abs=0.04)


def test_top_k_caps_the_nucleus():
    lp = logp_of({i: 1.0 for i in range(100, 200)})
    assert len(draws(RasSampler(EOS, seed=1), lp)) == 25


def test_repetition_redraws_from_the_full_distribution():
    lp = logp_of({7: 0.9, **{i: 0.1 / 50 for i in range(300, 350)}})
    plain = draws(RasSampler(EOS, seed=2), lp, decoded=[1, 2, 3])
    assert set(plain) == {7}
    repeated = draws(RasSampler(EOS, seed=2), lp, decoded=[7] + [1] * 9)
    others = sum(v for k, v in repeated.items() if k != 7)
    assert 0.05 < others / 3000 < 0.15  # ~10 % outside the nucleus
    outside_window = draws(RasSampler(EOS, seed=2), lp, decoded=[7] + [1] * 10)
    assert set(outside_window) == {7}


def test_end_of_speech_is_refused_before_the_minimum_length():
    lp = logp_of({EOS: 0.999, 5: 0.001})
    sampler = RasSampler(EOS, seed=3)
    assert all(sampler(lp, [], True) != EOS for _ in range(20))
    assert sampler(lp, [], False) == EOS


def test_seed_repeats_and_differs():
    lp = logp_of({i: 1.0 + (i % 7) for i in range(0, 60)})
    s1, s2, s3 = RasSampler(EOS, seed=5), RasSampler(EOS, seed=5), RasSampler(EOS, seed=6)
    seq1 = [s1(lp, [], False) for _ in range(50)]
    assert seq1 == [s2(lp, [], False) for _ in range(50)]
    assert seq1 != [s3(lp, [], False) for _ in range(50)]


def test_greedy_masks_fill_tokens_and_early_eos():
    lp = logp_of({6563: 0.6, EOS: 0.3, 42: 0.1})
    choose = greedy(EOS)
    assert choose(lp, [], False) == EOS
    assert choose(lp, [], True) == 42


@pytest.mark.parametrize("decoded", [[], [3] + [9] * 9])
def test_distribution_matches_upstream_ras_sampling(decoded):
    """Empirical distributions of ours and upstream's ``ras_sampling`` agree (total variation < 0.05)."""
    torch = pytest.importorskip("torch", reason="reference: scripts/install_reference.sh .venv")
    from tests.helpers import cosyvoice_reference as _reference

    _reference.install_shim()
    from cosyvoice.utils.common import ras_sampling

    rng = np.random.default_rng(0)
    logits = np.full(6564, -30.0, dtype=np.float32)
    logits[:40] = rng.normal(size=40).astype(np.float32) * 1.5
    logits[3] = 3.0  # a dominant token that the repetition rule can hit
    lp = logits - np.log(np.exp(logits.astype(np.float64)).sum()).astype(np.float32)
    n = 4000
    torch.manual_seed(0)
    theirs = Counter(int(ras_sampling(torch.from_numpy(lp), decoded, 25, top_p=0.8, top_k=25, win_size=10,
                                      tau_r=0.1)) for _ in range(n))
    ours = draws(RasSampler(EOS, seed=0), lp, decoded, n=n)
    keys = set(theirs) | set(ours)
    tv = 0.5 * sum(abs(theirs[k] - ours[k]) for k in keys) / n
    assert tv < 0.05, (tv, theirs.most_common(5), ours.most_common(5))
    assert set(ours) <= set(range(40))
