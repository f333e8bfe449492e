"""The particles' saved run (experiments/circle_pde/flow.follow): dense saves against landed
ones (issue 35: the metastability runs' cost)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tpde.experiments.circle_pde.config import Config
from tpde.experiments.circle_pde.draws import count
from tpde.experiments.circle_pde.flow import follow, post_ln_field
from tpde.experiments.circle_pde.metastable import crossing, mode_amplitudes
from tpde.experiments.common.circle_clusters import points_masses
from tpde.measures import Empirical
from tpde.theory import dominant_mode

TOL = SimpleNamespace(rtol=1e-6, atol=1e-8)  # the studies' dopri5 tolerances


def _cloud(n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    theta = 2 * np.pi * torch.rand(n, generator=g, dtype=torch.float64)
    return Empirical(torch.stack([theta.cos(), theta.sin()], -1))


def _saved(dense, times, tolerances=TOL, stop=None, seed=0):
    states = {}

    def visit(j, mu):
        assert mu.points.shape == (300, 2)  # every save is one cloud
        states[j] = mu.points.clone()

    cloud = _cloud(seed=seed)
    info = follow(tolerances, post_ln_field(5.0), cloud, times, visit, stop, dense=dense)
    return torch.stack([states[j] for j in sorted(states)]), info


def _counts(run) -> list[int]:
    config = Config()
    return [count(config, points_masses(points, config.cells)) for points in run]


def _escape(times, run) -> tuple[float, int, np.ndarray]:
    """The study's escape time (|ĉ_k*| crossing escape_level, metastable.crossing), the
    save j after it, and |ĉ_k*| at every save."""
    k, level = dominant_mode(5.0), Config().escape_level
    amplitude = np.array([mode_amplitudes(points)[k - 1] for points in run])
    t = crossing(times, amplitude, level)
    return t, int(np.flatnonzero(amplitude >= level)[0]), amplitude


@pytest.mark.parametrize("seed", [0, 4])
def test_dense_saves_give_the_studies_counts_and_escape_with_fewer_steps(seed):
    """Saves every 0.25 to t = 8 (three calls of CHUNK = 16 saves; the clusters form at t ≈ 1–6 and
    merge at 6–8 here), dense, landed and an rtol 1e-10 run of 300 tokens (S¹, β = 5). What
    the studies read: the cluster count at every save equal in all three, and the escape
    time (|ĉ_k*| crossing 0.1, log-linear between saves) within what the token errors allow:
    t = t₀ + Δ(ln L − ln a₀)/(ln a₁ − ln a₀) moves by at most Δ/(ln a₁ − ln a₀) · max|δ ln
    a| and |δĉ_k| ≤ k · max|δθ|, so |δt| ≤ Δ k E / ((ln a₁ − ln a₀) min(a₀, a₁)), E the
    largest token error at the two saves (×2 for the first-order expansion; 1.0e-3 and
    3.6e-3 for seeds 0 and 4, the worst case of every token's error turning |ĉ_k*| one way,
    60 and 40× the shifts measured). Measured over seeds 0–9 (dense, landed): token errors
    at most 2.9e-4 (seed 0, t = 6.5, the interpolant inside steps up to ~0.5 long as the
    clusters merge) and 3.6e-5; escape moved by at most 8.4e-5 (seed 4) and 1.2e-7; bounds
    6e-4 and 8e-5 (about 2× the worst measured); 22–26 dopri5 steps against 34."""
    times = np.arange(0.0, 8.0 + 1e-9, 0.25)
    dense, dense_info = _saved(True, times, seed=seed)
    landed, landed_info = _saved(False, times, seed=seed)
    exact, _ = _saved(False, times, SimpleNamespace(rtol=1e-10, atol=1e-12), seed=seed)
    assert dense.shape == landed.shape == (len(times), 300, 2)
    assert dense_info["status"] == landed_info["status"] == "completed"
    assert dense_info["until"] == landed_info["until"] == 8.0
    assert dense_info["steps"] < landed_info["steps"]
    counts = _counts(exact)
    assert _counts(dense) == _counts(landed) == counts
    assert max(counts) >= 2 and counts[0] == 0  # the window holds the clusters forming
    t_exact, j, a = _escape(times, exact)
    k = dominant_mode(5.0)
    for run, bound in ((dense, 6e-4), (landed, 8e-5)):
        error = (run - exact).norm(dim=-1).amax(dim=-1)
        assert float(error.max()) < bound
        assert float((run.norm(dim=-1) - 1).abs().max()) < 1e-12  # back on the circle
        E = float(error[j - 1 : j + 1].max())
        allowed = 2 * 0.25 * k * E / (np.log(a[j] / a[j - 1]) * min(a[j - 1], a[j]))
        assert abs(_escape(times, run)[0] - t_exact) <= allowed


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
