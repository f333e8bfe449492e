"""The sweeps' studies: one task function per study, its defaults and its value checks.

A study is a function of one task's parameters (a dict) returning plain numbers, its
defaults (every parameter it knows), the values each parameter accepts (:class:`Allowed`)
and a check of one task's parameters together. :data:`STUDIES` and :data:`CHECKS` hold them
by name (module notes of :mod:`tpde.experiments.sweep`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BLOWUP_DEFAULTS",
    "CHECKS",
    "CLUSTERING_DEFAULTS",
    "STUDIES",
    "Allowed",
    "blowup",
    "clustering",
    "flow_status",
    "run_task",
    "task_status",
]


BLOWUP_DEFAULTS = {
    "variant": "softmax",
    "d": 2,
    "heads": 1,
    "samples": 64,
    "value_scale": 1.0,
    "key_shift": 0.0,
    "init_scale": 1.0,
    "horizon": 20.0,
    "tol_low": 1e-5,
    "tol_high": 1e3,
}


def blowup(params: dict) -> dict:
    """Fractions of random (Q, K, V, Σ₀) that blow up, converge or neither (one task)."""
    import torch

    from ..common.paper import flow, paper_field

    torch.set_num_threads(1)
    p = {**BLOWUP_DEFAULTS, **params}
    d, s = int(p["d"]), int(p["samples"])
    gen = torch.Generator().manual_seed(int(p["seed"]))
    Q = torch.randn(s, d, d, generator=gen, dtype=torch.float64)
    K = torch.randn(s, d, d, generator=gen, dtype=torch.float64) + p["key_shift"] * Q
    V = p["value_scale"] * torch.randn(s, d, d, generator=gen, dtype=torch.float64)
    G = torch.randn(s, d, d, generator=gen, dtype=torch.float64)
    S0 = p["init_scale"] * G @ G.mT / d
    field = paper_field(p["variant"], Q.numpy(), K.numpy(), V.numpy(), heads=int(p["heads"]))
    res = flow(
        field,
        S0.numpy(),
        horizon=float(p["horizon"]),
        tol_low=float(p["tol_low"]),
        tol_high=float(p["tol_high"]),
        first_step=0.01,
    )
    status = np.asarray(res.status).astype(str)
    blown, conv = status == "blow_up", status == "converged"
    evals = np.linalg.eigvalsh(res.final[conv]) if conv.any() else np.zeros((0, d))
    return {
        "blow_up_fraction": float(blown.mean()),
        "converged_fraction": float(conv.mean()),
        "neither_fraction": float(1 - blown.mean() - conv.mean()),
        "median_blow_up_time": float(np.median(res.event_time[blown])) if blown.any() else None,
        "median_anisotropy": float(np.median(evals[:, -1] / evals.sum(-1))) if conv.any() else None,
        "flow_status": flow_status(status, ("blow_up", "converged", "completed")),
    }


CLUSTERING_DEFAULTS = {
    "scheme": "post-ln",
    "beta": 1.0,
    "d": 3,
    "n": 32,
    "samples": 16,
    "horizon": 30.0,
    "dt": 0.05,
    "saves": 301,
    "delta": 1e-3,
    "ngpt_alpha": 1.0,
    "switch": 0.5,
    "max_steps": 100_000,
}


def flow_status(status: np.ndarray, finished: tuple[str, ...] = ("completed",)) -> str:
    """The statuses of a task's runs that mean it did not finish, as "max_steps: 3/16"
    (status: count/runs, joined by "; "), or "completed" when every run finished."""
    status = np.asarray(status).astype(str).ravel()
    names, counts = np.unique(status[~np.isin(status, finished)], return_counts=True)
    parts = [f"{n}: {c}/{status.size}" for n, c in zip(names, counts, strict=True)]
    return "; ".join(parts) or "completed"


def clustering(params: dict) -> dict:
    """Angular clustering of ``samples`` uniform clouds under one normalisation (one task)."""
    import torch

    from tpde.flows import integrate
    from tpde.measures import uniform_on_sphere
    from tpde.metrics import angular_cluster_count, cluster_density, time_to_single_cluster

    from ..common.schemes import scheme_field, scheme_start

    torch.set_num_threads(1)
    p = {**CLUSTERING_DEFAULTS, **params}
    d, horizon = int(p["d"]), float(p["horizon"])
    field = scheme_field(p["scheme"], p["beta"], d, horizon, switch=p["switch"],
                         alpha=float(p["ngpt_alpha"]))  # fmt: skip
    gen = torch.Generator().manual_seed(int(p["seed"]))
    mu = scheme_start(field, uniform_on_sphere(int(p["n"]), d, batch=(int(p["samples"]),),
                                               generator=gen))  # fmt: skip
    traj = integrate(field, mu, horizon, dt=float(p["dt"]), method="rk4", save=int(p["saves"]),
                     events=(), max_steps=int(p["max_steps"]))  # fmt: skip
    delta = float(p["delta"])
    times = time_to_single_cluster(traj, delta).numpy()
    reached = np.isfinite(times)
    final = angular_cluster_count(traj.final, delta).numpy()
    return {
        "one_cluster_fraction": float(reached.mean()),
        "median_time_to_one_cluster": float(np.median(times[reached])) if reached.any() else None,
        "mean_final_clusters": float(final.mean()),
        "median_final_clusters": float(np.median(final)),
        "final_density": float(cluster_density(traj.final, delta).mean()),
        "blow_up_fraction": float((np.asarray(traj.status) == "blow_up").mean()),
        "flow_status": flow_status(traj.status),
    }


STUDIES = {
    "blowup": (blowup, BLOWUP_DEFAULTS),
    "clustering": (clustering, CLUSTERING_DEFAULTS),
}


@dataclass(frozen=True)
class Allowed:
    """The values a study accepts for one parameter: a type and a lower bound, or choices."""

    kind: type
    low: float | None = None
    strict: bool = False  # the bound itself is excluded
    choices: tuple = ()

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(repr, self.choices))
        kind = "an int" if self.kind is int else "a finite number"
        if self.low is None:
            return kind
        return f"{kind} {'>' if self.strict else '>='} {self.low:g}"

    def type_ok(self, value) -> bool:
        if isinstance(value, bool):
            return False
        return (
            isinstance(value, int | float) if self.kind is float else isinstance(value, self.kind)
        )

    def value_ok(self, value) -> bool:
        if self.choices:
            return value in self.choices
        if not math.isfinite(value):
            return False
        return self.low is None or (value > self.low if self.strict else value >= self.low)


def _blowup_allowed() -> dict[str, Allowed]:
    from ..common.paper import PAPER_VARIANTS

    return {
        "variant": Allowed(str, choices=PAPER_VARIANTS),
        "d": Allowed(int, 1),
        "heads": Allowed(int, 1),
        "samples": Allowed(int, 1),
        "value_scale": Allowed(float),
        "key_shift": Allowed(float),
        "init_scale": Allowed(float, 0, strict=True),
        "horizon": Allowed(float, 0, strict=True),
        "tol_low": Allowed(float, 0, strict=True),
        "tol_high": Allowed(float, 0, strict=True),
    }


#: The studies' memory cap: entries of one float64 array of one task (1 GiB), e.g. a
#: blowup task's batch of covariances, samples · d² (its Dormand–Prince stages hold about
#: ten such tensors), or a clustering task's saved states or scores.
TASK_MAX_ENTRIES = 2**27


def _blowup_combined(params: dict) -> str | None:
    """What is wrong with one task's parameters taken together (None: nothing)."""
    p = {**BLOWUP_DEFAULTS, **params}
    if p["variant"] == "multihead" and p["d"] % p["heads"]:
        return (
            f"variant 'multihead' splits d into heads blocks of equal size; d = {p['d']} is "
            f"not a multiple of heads = {p['heads']}"
        )
    entries = p["samples"] * p["d"] ** 2
    if entries > TASK_MAX_ENTRIES:
        return (
            f"samples · d² = {entries:.3g} covariance entries per task exceed "
            f"{TASK_MAX_ENTRIES} (1 GiB of float64, about ten times that while integrating); "
            "use fewer samples per task and more seeds"
        )
    start = p["init_scale"] * p["d"]  # E tr Σ₀ = init_scale · E tr(GGᵀ)/d = init_scale · d
    if p["tol_high"] <= start:
        return (
            f"tol_high = {p['tol_high']:g} is not above the mean initial trace "
            f"init_scale · d = {start:g}: the samples start above the blow-up threshold (the "
            "event fires on upward crossings only), so none can blow up; raise tol_high or "
            "lower init_scale"
        )
    return None


def _clustering_allowed() -> dict[str, Allowed]:
    from tpde.fields import SCHEMES

    return {
        "scheme": Allowed(str, choices=tuple(SCHEMES)),
        "beta": Allowed(float, 0),
        "d": Allowed(int, 2),
        "n": Allowed(int, 2),
        "samples": Allowed(int, 1),
        "horizon": Allowed(float, 0, strict=True),
        "dt": Allowed(float, 0, strict=True),
        "saves": Allowed(int, 2),
        "delta": Allowed(float, 0, strict=True),
        "ngpt_alpha": Allowed(float, 0, strict=True),
        "switch": Allowed(float, 0, strict=True),
        "max_steps": Allowed(int, 1),
    }


def delta_resolution(d: int) -> float:
    """The smallest cluster threshold δ the clustering study's float64 tokens resolve in
    dimension d: 4·d·eps, the rule :func:`tpde.metrics.angular_cluster_count` applies."""
    return 4 * d * float(np.finfo(np.float64).eps)


def _clustering_combined(params: dict) -> str | None:
    """Upper bounds of the clustering study (memory: the saved states and one step's scores
    each within 2²⁷ float64; 4·d·eps ≤ δ < 2: cos > 1 − δ > −1, resolved by float64; the
    Mix-LN switch inside the horizon, as a fraction of it)."""
    p = {**CLUSTERING_DEFAULTS, **params}
    saved = p["saves"] * p["samples"] * p["n"] * p["d"]
    scores = p["samples"] * p["n"] ** 2
    if max(saved, scores) > TASK_MAX_ENTRIES:
        return (
            f"saves · samples · n · d = {saved:.3g} saved coordinates and samples · n² = "
            f"{scores:.3g} scores per task may not exceed {TASK_MAX_ENTRIES} (1 GiB of "
            "float64 each); use fewer samples per task and more seeds, or fewer saves"
        )
    if p["saves"] > p["max_steps"] + 1:
        return (
            f"saves = {p['saves']} may not exceed max_steps + 1 = {p['max_steps'] + 1} (every "
            "saved time ends a step)"
        )
    if p["delta"] >= 2:
        return f"delta must lie in (0, 2) (links need cos > 1 − δ > −1); received {p['delta']}"
    resolution = delta_resolution(p["d"])
    if p["delta"] < resolution:
        return (
            f"float64 cannot resolve delta = {p['delta']:g} in d = {p['d']}: cosines carry "
            f"rounding errors of ~d·eps, so delta must be >= 4·d·eps = {resolution:.3g} "
            "(the rule of tpde.metrics.angular_cluster_count)"
        )
    if p["scheme"] == "mix-ln" and p["switch"] >= 1:
        return (
            f"switch is the fraction of the horizon where Mix-LN hands over to Pre-LN and "
            f"must lie in (0, 1); received {p['switch']}"
        )
    return None


#: study -> (allowed values per parameter (a function: it may import the study's code),
#: check of one task's parameters together).
CHECKS = {
    "blowup": (_blowup_allowed, _blowup_combined),
    "clustering": (_clustering_allowed, _clustering_combined),
}


def task_status(result: dict) -> str:
    """ "ok"; the runs that did not finish (the result's ``flow_status``, e.g. "max_steps:
    2/16": the values are those of unfinished runs); or "non_finite: KEYS" naming the
    result values that are NaN or ±Inf."""
    unfinished = result.get("flow_status", "completed")
    if unfinished != "completed":
        return unfinished
    bad = [k for k, v in sorted(result.items()) if isinstance(v, float) and not math.isfinite(v)]
    return "non_finite: " + ", ".join(bad) if bad else "ok"


def run_task(study: str, params: dict) -> dict:
    """Run one task (module-level, so Dask pickles it by reference)."""
    return STUDIES[study][0](params)
