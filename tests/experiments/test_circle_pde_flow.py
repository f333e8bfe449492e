"""The particles' saved run (experiments/circle_pde/flow.follow): dense saves against landed
ones (issue 35: the metastability runs' cost)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tpde.experiments.circle_pde.flow import follow, post_ln_field
from tpde.measures import Empirical

TOL = SimpleNamespace(rtol=1e-6, atol=1e-8)  # the studies' dopri5 tolerances


def _cloud(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    theta = 2 * np.pi * torch.rand(n, generator=g, dtype=torch.float64)
    return Empirical(torch.stack([theta.cos(), theta.sin()], -1))


def _saved(dense, times, tolerances=TOL, stop=None):
    states = {}

    def visit(j, mu):
        assert mu.points.shape == (300, 2)  # every save is one cloud, batched or not
        states[j] = mu.points.clone()

    info = follow(tolerances, post_ln_field(5.0), _cloud(), times, visit, stop, dense=dense)
    return torch.stack([states[j] for j in sorted(states)]), info


def test_dense_saves_match_landed_ones_with_fewer_steps():
    """Saves every 0.25 to t = 6 (two calls of CHUNK = 16 saves, the second one partial):
    both runs hold every save, dense with fewer dopri5 steps (18 against 26), and both
    lie near an rtol 1e-10 run: measured per token at most 7.5e-5 (dense: the cubic
    Hermite interpolant inside steps up to ~0.5 long, O(h⁴), with 300 tokens already
    clustering by t = 6) and 7.6e-6 (landed); bounds 2e-4 and 2e-5 (about 2.5× the
    measured, the runs' rtol 1e-6 carried over the escape's growth e^{λt}, λ ≈ 0.68)."""
    times = np.arange(0.0, 6.0 + 1e-9, 0.25)
    dense, dense_info = _saved(True, times)
    landed, landed_info = _saved(False, times)
    exact, _ = _saved(False, times, SimpleNamespace(rtol=1e-10, atol=1e-12))
    assert dense.shape == landed.shape == (len(times), 300, 2)
    assert dense_info["status"] == landed_info["status"] == "completed"
    assert dense_info["until"] == landed_info["until"] == 6.0
    assert dense_info["steps"] < landed_info["steps"]
    for run, bound in ((dense, 2e-4), (landed, 2e-5)):
        assert float((run - exact).norm(dim=-1).max()) < bound
        assert float((run.norm(dim=-1) - 1).abs().max()) < 1e-12  # back on the circle


def test_a_stop_ends_a_dense_run_after_its_call():
    times = np.arange(0.0, 12.0 + 1e-9, 0.25)
    states, info = _saved(True, times, stop=lambda j: j >= 16)
    assert info["status"] == "stopped" and info["until"] == 4.0
    assert len(states) == 17  # saves 0 … 16: the first call's


@pytest.mark.parametrize("dense", [1, "yes", None])
def test_dense_must_be_a_bool(dense):
    with pytest.raises(TypeError, match=r"dense must be True .* received"):
        follow(TOL, post_ln_field(5.0), _cloud(), np.array([0.0, 1.0]), lambda j, mu: None,
               dense=dense)  # fmt: skip
