"""The circle-pde study's particle flow: the SA post-LN field on S¹ and the saved run of a
cloud (run.py, long.py and gap.py share them)."""

from __future__ import annotations

import numpy as np
import torch

from tpde.fields import Normalized, Softmax
from tpde.flows import integrate
from tpde.measures import Empirical

from .config import CHUNK, Config

__all__ = ["follow", "post_ln_field"]


def post_ln_field(beta: float):
    eye = torch.eye(2, dtype=torch.float64)
    return Normalized(Softmax(eye, eye, eye, scale=beta), "post-ln")


def follow(
    config: Config, field, cloud: Empirical, times: np.ndarray, visit, stop=None, *, dense=True
) -> dict:
    """The particles from ``cloud`` by dopri5, saved at ``times`` in calls of CHUNK saves
    (the clouds of one call are held at once); ``visit(j, measure)`` at every save;
    ``stop(j)`` (optional), asked after each call with the last save j visited, ends the
    run early when true (``status`` "stopped", ``until`` the last time reached).

    ``dense`` (the default): ``integrate(..., saves="interpolated")``, dopri5 takes its own
    steps and the saves inside a step are the cubic Hermite interpolants of its ends
    (:class:`tpde.flows.saving.DenseSaves`, O(h⁴), projected back on the sphere); only each
    call's end is landed on. ``dense=False``: ``saves="landed"``, every save time is landed
    on, which caps the step at the save spacing. Measured by ``python
    tools/metastability_cost.py --accuracy`` (MATH.md §9), saves every 0.25 to t = 8 from
    the studies' first clouds: 18 steps against 34 (S¹, β = 5, 10⁵ tokens) and 24 against 34
    (S², β = 5, 10⁴); the largest distance of a token to an rtol 1e-9 run, 6.0e-5 against
    1.4e-6 (S¹) and 1.4e-4 against 2.6e-5 (S²; the longer steps and the interpolant). What
    the studies read moves far less: the escape time of the S² draw of 10⁵ tokens by
    1.7e-5 (its spread over draws ~0.9), its cluster counts not at all.

    Raises TypeError unless ``dense`` is a bool.
    """
    if not isinstance(dense, bool):
        raise TypeError(f"dense must be True (saves by interpolation) or False (landed on); "
                        f"received {dense!r}.")  # fmt: skip
    visit(0, cloud)
    mu, saves = cloud, "interpolated" if dense else "landed"
    dt, steps, status, until = None, 0, "completed", float(times[-1])
    for lo in range(0, len(times) - 1, CHUNK):
        if lo and stop is not None and stop(lo):
            status, until = "stopped", float(times[lo])
            break
        chunk = times[lo : lo + CHUNK + 1]
        traj = integrate(
            field,
            mu,
            float(chunk[-1]),
            t0=float(chunk[0]),
            method="dopri5",
            dt=dt,
            save=chunk.tolist(),
            rtol=config.rtol,
            atol=config.atol,
            engine="auto",
            saves=saves,
        )
        for j, measure in enumerate(traj.measures[1:], lo + 1):
            visit(j, measure)
        steps += int(traj.stats["n_steps"])
        mu, status = traj.measures[-1], str(traj.status.item())
        dt = float(traj.stats["last_dt"])
        if status != "completed":
            until = float(traj.times[-1])
            break
    return {"steps": steps, "status": status, "until": until}
