"""integrate(..., saves=...): landed and interpolated save times against a closed form.

The field: Softmax with Q = 0 attends uniformly, so ẋ_i = V x̄ (x̄ the cloud's mean): the
mean solves x̄' = V x̄ and each token x_i(t) = x_i(0) − x̄(0) + e^{tV} x̄(0), in closed form.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tpde.fields import Softmax
from tpde.flows import integrate
from tpde.measures import Empirical

F64 = torch.float64
V = torch.tensor([[-1.0, 0.5], [-0.5, -0.2]], dtype=F64)
FIELD = Softmax(torch.zeros(2, 2, dtype=F64), torch.eye(2, dtype=F64), V)
TIMES = np.linspace(0.0, 6.0, 121).tolist()  # saves every 0.05
RTOL, ATOL = 1e-8, 1e-10


def _cloud(seed: int = 0, batch: tuple = ()) -> Empirical:
    generator = torch.Generator().manual_seed(seed)
    return Empirical(torch.randn(*batch, 12, 2, generator=generator, dtype=F64))


def _exact(points: torch.Tensor, t: float) -> torch.Tensor:
    mean = points.mean(dim=-2, keepdim=True)
    return points - mean + mean @ torch.linalg.matrix_exp(t * V).mT


def _run(mu, saves, save=TIMES, t1=6.0):
    return integrate(FIELD, mu, t1, method="dopri5", save=save, rtol=RTOL, atol=ATOL, saves=saves)


def _errors(traj, points) -> list[float]:
    return [
        float((m.points - _exact(points, t)).abs().max())
        for t, m in zip(traj.times, traj.measures, strict=True)
    ]


def test_interpolated_saves_follow_the_closed_form_within_the_hermite_bound():
    # The steps of the interpolated run are its own (save="steps" lockstep: the same steps,
    # only t1 landed on); the cubic Hermite interpolant's error on a step of length h is
    # ≤ h⁴/384 · max|y⁗| (Hairer, Nørsett & Wanner I, §II.6), |y⁗| ≤ ‖V‖⁴ |x̄(0)| here
    # (‖e^{tV}‖ ≤ 1: V + Vᵀ is negative definite), plus the step's own error (≤ 10 × the
    # tolerance, a safety factor for dopri5's local-to-global growth).
    mu = _cloud()
    interpolated = _run(mu, "interpolated")
    steps = _run(mu, "landed", save="steps")
    h = max(np.diff(steps.times))
    assert interpolated.stats["n_steps"] < len(TIMES) - 1  # steps longer than the spacing
    assert h > 2 * (TIMES[1] - TIMES[0])
    norm = float(torch.linalg.matrix_norm(V, ord=2))
    mean = float(mu.points.mean(dim=0).norm())
    bound = h**4 / 384 * norm**4 * mean + 10 * (RTOL * 3 + ATOL)
    errors = _errors(interpolated, mu.points)
    assert interpolated.times == pytest.approx(TIMES, abs=0)
    assert max(errors) < bound, (max(errors), bound)
    # ... and the interpolant is at work: the landed run is more accurate at the saves.
    assert max(_errors(_run(mu, "landed"), mu.points)) < max(errors)


def test_landed_saves_are_the_default_of_an_unbatched_run_and_land_on_every_time():
    mu = _cloud(1)
    default, landed = _run(mu, "auto"), _run(mu, "landed")
    assert default.stats["n_steps"] == landed.stats["n_steps"] >= len(TIMES) - 1
    for a, b in zip(default.measures, landed.measures, strict=True):
        assert torch.equal(a.points, b.points)
    assert max(_errors(landed, mu.points)) < 10 * (RTOL * 3 + ATOL)  # the method's own error


def test_batched_and_unbatched_interpolated_runs_agree():
    # A per-element batch interpolates by default; each element's saves are those of its
    # run alone (its own steps). Batched pairwise sums may round differently: 1e-13.
    mu = _cloud(2, batch=(3,))
    batched, auto = _run(mu, "interpolated"), _run(mu, "auto")
    for a, b in zip(batched.measures, auto.measures, strict=True):
        assert torch.equal(a.points, b.points)
    for k in range(3):
        alone = _run(Empirical(mu.points[k]), "interpolated")
        for a, b in zip(batched.measures, alone.measures, strict=True):
            torch.testing.assert_close(a.points[k], b.points, rtol=1e-13, atol=1e-13)
    one = _run(Empirical(mu.points[:1]), "interpolated")
    alone = _run(Empirical(mu.points[0]), "interpolated")
    assert one.stats["n_steps"] == alone.stats["n_steps"]
    for a, b in zip(one.measures, alone.measures, strict=True):
        torch.testing.assert_close(a.points[0], b.points, rtol=1e-13, atol=1e-13)
    landed = _run(mu, "landed")  # landed per element: every element on every save time
    assert int(np.min(landed.stats["n_steps"])) >= len(TIMES) - 1
    assert max(_errors(landed, mu.points)) < 10 * (RTOL * 3 + ATOL)


def test_saves_is_validated():
    mu = _cloud()
    with pytest.raises(ValueError, match="unknown saves 'dense'; choose one of 'auto'"):
        _run(mu, "dense")
    with pytest.raises(TypeError, match=r"saves must be 'auto'.*received True \(bool\)"):
        _run(mu, True)
    with pytest.raises(ValueError, match="saves='interpolated' needs save times"):
        _run(mu, "interpolated", save="steps")
    split = FIELD + Softmax(
        torch.eye(2, dtype=F64), torch.eye(2, dtype=F64), -torch.eye(2, dtype=F64)
    )
    with pytest.raises(ValueError, match="splitting method 'lie-trotter' does not form"):
        integrate(split, mu, 1.0, dt=0.1, method="lie-trotter", save=4, saves="interpolated")
    assert math.isfinite(float(_run(mu, "landed", save=None, t1=0.5).final.points.sum()))
