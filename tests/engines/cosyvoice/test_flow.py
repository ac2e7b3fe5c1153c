"""The Euler CFM solver's estimator feeds, with a stand-in session (no model, no torch).

Graphs from our converter have no ``mask`` input; graphs converted before the CPU-form estimator have one
and must get ones. Both must see upstream's CFG batch: row 0 conditioned, row 1 with mu/spks/cond zeroed.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from cosyedge.engines.cosyvoice.common.flow import FlowDecoder, FlowParams


pytestmark = pytest.mark.reference  # runs in .venv-ref (PyTorch reference / converter stack)


class RecordingEstimator:
    """Returns a velocity of ones and records every feed."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.feeds: list[dict[str, np.ndarray]] = []

    def get_inputs(self):
        return [SimpleNamespace(name=n) for n in self.names]

    def run(self, _outputs, feeds):
        self.feeds.append(feeds)
        return [np.ones_like(feeds["x"])]


@pytest.mark.parametrize("names", [["x", "mu", "t", "spks", "cond"], ["x", "mask", "mu", "t", "spks", "cond"]])
def test_solver_feeds_match_the_graph_inputs(names):
    est = RecordingEstimator(names)
    noise = np.random.default_rng(0).standard_normal((80, 100)).astype(np.float32)
    decoder = FlowDecoder(None, est, noise, FlowParams())
    mu = np.full((80, 30), 2.0, dtype=np.float32)
    cond = np.full((80, 30), 3.0, dtype=np.float32)
    x = decoder.solve(mu, np.full(80, 4.0, dtype=np.float32), cond, n_timesteps=4)
    assert len(est.feeds) == 4
    for feeds in est.feeds:
        assert sorted(feeds) == sorted(names)
        if "mask" in names:
            np.testing.assert_array_equal(feeds["mask"], np.ones((2, 1, 30), dtype=np.float32))
        assert feeds["x"].shape == (2, 80, 30)
        np.testing.assert_array_equal(feeds["x"][0], feeds["x"][1])
        assert (feeds["mu"][0] == 2.0).all() and (feeds["mu"][1] == 0.0).all()
        assert (feeds["cond"][0] == 3.0).all() and (feeds["cond"][1] == 0.0).all()
        assert (feeds["spks"][0] == 4.0).all() and (feeds["spks"][1] == 0.0).all()
    # v = 1 in both rows: (1 + r) - r = 1 per unit time, so x moves by exactly t_end - t_start = 1.
    np.testing.assert_allclose(x, noise[:, :30] + 1.0, atol=1e-6)
