"""The computations of the ``sphere`` study (package notes): ``run(config, out)`` writes
the raw data."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from tpde.fields import Normalized
from tpde.flows import BlowUp, Clustered, integrate
from tpde.measures import Empirical, Gaussian, uniform_on_sphere
from tpde.metrics import angular_cluster_count, clusters_over_time, time_to_single_cluster
from tpde.metrics.diagnostics import effective_rank

from .. import framework as fw
from ..common.schemes import glpr_softmax, scheme_field, scheme_start
from ..common.sphere_diagram import (
    checkpoint_times,
    density_table,
    post_ln,
    systems_for,
)
from .config import BLOWUP_TRACE, DELTA, F64, Config
from .draws import run_metastable
from .sizes import first_time_above, run_sizes


# ---------------------------------------------------------------------- (a) phase diagram
def betas_of(config: Config) -> np.ndarray:
    return np.linspace(config.beta_min, config.beta_max, config.betas)


def run_diagram(config: Config, d: int) -> tuple[dict, dict]:
    betas = betas_of(config)
    gen = fw.torch_generator(config.seed + 100 * d)
    mu = systems_for(config.betas, config.systems, config.tokens, d, gen)
    times = checkpoint_times(config.t1, config.checkpoints)
    table = density_table(post_ln(betas, d), mu, times, method="rk4",
                          steps_per_interval=config.steps_per_checkpoint,
                          progress=lambda it: fw.progress(it, f"sphere d={d}"))  # fmt: skip
    arrays = {f"density_d{d}": table.mean, f"density_se_d{d}": table.se}
    results = {
        "seconds": table.seconds,
        "steps": table.steps,
        "rhs": table.rhs,
        "status": table.status,
        "final_density": table.mean[:, -1].tolist(),
        "t_half": first_time_above(times, table.mean, 0.5).tolist(),
        "t_99": first_time_above(times, table.mean, 0.99).tolist(),
        "max_se": float(table.se.max()),
    }
    return arrays, results


def run_large_diagram(config: Config) -> tuple[dict, dict]:
    """(a') The d = 3 diagram at ``large_tokens`` tokens per cloud on every
    ``large_every``-th β of (a), the same checkpoints: the post-LN field on the harmonics
    engine (``engine="auto"`` takes it from ~1500 tokens), the density from sampled pairs."""
    betas = betas_of(config)[:: config.large_every]
    gen = fw.torch_generator(config.seed + 300)
    mu = systems_for(len(betas), config.large_systems, config.large_tokens, 3, gen)
    times = checkpoint_times(config.t1, config.checkpoints)
    table = density_table(post_ln(betas, 3), mu, times, method="rk4",
                          steps_per_interval=config.steps_per_checkpoint,
                          pairs=config.large_pairs, generator=gen,
                          progress=lambda it: fw.progress(it, "sphere d=3, large"))  # fmt: skip
    arrays = {"large_density_d3": table.mean, "large_density_se_d3": table.se}
    results = {
        "seconds": table.seconds,
        "rhs": table.rhs,
        "status": table.status,
        "betas": betas.tolist(),
        "t_half": first_time_above(times, table.mean, 0.5).tolist(),
        "max_se": float(table.se.max()),
    }
    return arrays, results


def run_one_cluster(config: Config) -> dict:
    """d ≥ 3, β = cluster_beta: every seed's cloud stopped by Clustered(1e-4) (one batch)."""
    gen = fw.torch_generator(config.seed + 7)
    mu = uniform_on_sphere(config.tokens, config.cluster_dim, batch=(config.cluster_seeds,),
                           generator=gen)  # fmt: skip
    field = Normalized(glpr_softmax(config.cluster_beta, config.cluster_dim))
    traj = integrate(field, mu, config.cluster_t1, method="dopri5", rtol=1e-8, atol=1e-10,
                     events=(Clustered(1e-4),))  # fmt: skip
    status = np.asarray(traj.status).astype(str)
    return {
        "status": {s: int((status == s).sum()) for s in sorted(set(status))},
        "event_time": traj.event_time.numpy().tolist(),
        "final_clusters": angular_cluster_count(traj.final, DELTA).tolist(),
        "norm_error": float((traj.final.points.norm(dim=-1) - 1).abs().max()),
    }


# ---------------------------------------------------------------------- (b) schemes
def angular_profile(traj) -> dict:
    """Clusters, angular speed, effective rank of Σ w θθᵀ and mean radius over time."""
    points = torch.stack([m.points for m in traj.measures])  # (T, n, d)
    weights = traj.measures[0].weights
    theta = torch.nn.functional.normalize(points, dim=-1)
    chord = (theta[1:] - theta[:-1]).norm(dim=-1).clamp(max=2.0)
    swept = 2 * torch.asin(chord / 2)  # the angle between consecutive saves, per token
    dt = torch.diff(traj.times)
    second = torch.einsum("tni,tnj,n->tij", theta, theta, weights)
    second = 0.5 * (second + second.mT)
    return {
        "times": traj.times.numpy(),
        "clusters": clusters_over_time(traj, DELTA).numpy(),
        "speed": ((swept @ weights) / dt).numpy(),
        "erank": effective_rank(second).numpy(),
        "radius": (points.norm(dim=-1) @ weights).numpy(),
        "norm_error": float((points.norm(dim=-1) - 1).abs().max()),
    }


def run_schemes(config: Config) -> tuple[dict, dict]:
    gen = fw.torch_generator(config.seed + 11)
    mu = uniform_on_sphere(config.scheme_tokens, config.scheme_dim, generator=gen)
    times = np.linspace(0, config.scheme_t1, config.scheme_saves).tolist()
    arrays, results = {}, {}
    for scheme in config.schemes:
        field = scheme_field(scheme, config.scheme_beta, config.scheme_dim, config.scheme_t1,
                             alpha=config.ngpt_alpha)  # fmt: skip
        start = scheme_start(field, mu)
        traj = integrate(field, start, config.scheme_t1, dt=config.scheme_dt, method="rk4",
                         save=times, events=())  # fmt: skip
        profile = angular_profile(traj)
        norm_error = profile.pop("norm_error")
        for key, value in profile.items():
            arrays[f"scheme__{scheme}__{key}"] = value
        one = float(time_to_single_cluster(traj, DELTA))
        results[scheme] = {
            "status": str(traj.status),
            "time_to_one_cluster": one,
            "final_clusters": int(profile["clusters"][-1]),
            "final_erank": float(profile["erank"][-1]),
            "mean_speed_first_half": float(profile["speed"][: len(profile["speed"]) // 2].mean()),
            "final_radius": float(profile["radius"][-1]),
            "max_norm_error": norm_error,
        }
    return arrays, results


# ---------------------------------------------------------------------- (c) R^d vs sphere
def run_blowup(config: Config) -> tuple[dict, dict]:
    d, beta = config.blowup_dim, config.blowup_beta
    g0 = Gaussian(torch.zeros(d, dtype=F64), torch.eye(d, dtype=F64))
    cloud = Empirical.from_gaussian(g0, config.blowup_tokens,
                                    generator=fw.torch_generator(config.seed + 13))  # fmt: skip
    field = glpr_softmax(beta, d)
    t_star = 1 / (2 * beta * float(torch.linalg.eigvalsh(g0.cov()).max()))
    times = np.linspace(0, config.blowup_t1, 121).tolist()
    event = (BlowUp(BLOWUP_TRACE, size="trace"),)
    ode_times = np.linspace(0, min(config.blowup_t1, 2 * t_star), 201).tolist()
    ode = integrate(field, g0, config.blowup_t1, method="dopri5", rtol=1e-10, atol=1e-12,
                    save=ode_times, events=event)  # fmt: skip
    flows = {"method": "dopri5", "rtol": 1e-8, "atol": 1e-10, "save": times}
    particles = integrate(field, cloud, config.blowup_t1, events=event, **flows)
    sphere = integrate(Normalized(field), cloud.normalized(), config.blowup_t1, events=(),
                       **flows)  # fmt: skip
    arrays = {
        "blowup__ode_times": ode.times.numpy(),
        "blowup__ode_trace": np.array([float(g.cov().trace()) for g in ode.measures]),
        "blowup__particle_times": particles.times.numpy(),
        "blowup__particle_trace": np.array([float(m.cov().trace()) for m in particles.measures]),
        "blowup__particle_clusters": clusters_over_time(particles, DELTA).numpy(),
        "blowup__sphere_times": sphere.times.numpy(),
        "blowup__sphere_clusters": clusters_over_time(sphere, DELTA).numpy(),
    }
    results = {
        "t_star": t_star,
        "ode_status": str(ode.status),
        "ode_event_time": float(ode.event_time),
        "particle_status": str(particles.status),
        "particle_event_time": float(particles.event_time),
        "particle_clusters_at_event": int(arrays["blowup__particle_clusters"][-1]),
        "sphere_time_to_one_cluster": float(time_to_single_cluster(sphere, DELTA)),
        "sphere_final_clusters": int(arrays["blowup__sphere_clusters"][-1]),
    }
    return arrays, results


def run_movie(config: Config) -> dict:
    gen = fw.torch_generator(config.seed + 17)
    mu = uniform_on_sphere(config.tokens, 2, generator=gen)
    times = np.linspace(0, config.t1, config.movie_frames).tolist()
    traj = integrate(Normalized(glpr_softmax(config.movie_beta, 2)), mu, config.t1, method="dopri5",
                     rtol=1e-8, atol=1e-10, save=times, events=())  # fmt: skip
    return {
        "movie__points": np.stack([m.points.numpy() for m in traj.measures]).astype(np.float32),
        "movie__times": traj.times.numpy(),
        "movie__clusters": clusters_over_time(traj, DELTA).numpy(),
    }


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    arrays, results = {"betas": betas_of(config)}, {}
    arrays["times"] = checkpoint_times(config.t1, config.checkpoints)
    for d in config.dims:
        data, summary = run_diagram(config, d)
        arrays.update(data)
        results[f"diagram_d{d}"] = summary
    if 3 in config.dims:
        data, results["large_diagram_d3"] = run_large_diagram(config)
        arrays.update(data)
    if config.size_tokens:
        data, results["size_scan"] = run_sizes(config)
        arrays.update(data)
    results["one_cluster"] = run_one_cluster(config)
    data, results["schemes"] = run_schemes(config)
    arrays.update(data)
    data, results["blowup"] = run_blowup(config)
    arrays.update(data)
    arrays.update(run_movie(config))
    if config.meta_betas or config.escape_sizes:
        data, results["metastable"] = run_metastable(config)
        arrays.update(data)
    fw.save(out, config, arrays, results, started)
