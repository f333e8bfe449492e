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


def follow(config: Config, field, cloud: Empirical, times: np.ndarray, visit, stop=None) -> dict:
    """The particles from ``cloud`` by dopri5, saved at ``times`` in calls of CHUNK saves
    (the clouds of one call are held at once); ``visit(j, measure)`` at every save;
    ``stop(j)`` (optional), asked after each call with the last save j visited, ends the
    run early when true (``status`` "stopped", ``until`` the last time reached)."""
    visit(0, cloud)
    mu, dt, steps, status, until = cloud, None, 0, "completed", float(times[-1])
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
        )
        for j, measure in enumerate(traj.measures[1:], lo + 1):
            visit(j, measure)
        steps += traj.stats["n_steps"]
        mu, dt, status = traj.measures[-1], traj.stats["last_dt"], str(traj.status)
        if status != "completed":
            until = float(traj.times[-1])
            break
    return {"steps": steps, "status": status, "until": until}
