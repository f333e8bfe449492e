r"""Experiment 8: normalised tokens — GLPR's phase diagram, the LayerNorm schemes, blow-up
against clustering (MATH.md §7).

(a) **Phase diagram** (Geshkovski, Letrouit, Polyanskiy, Rigollet, arXiv:2312.10794): for
each of ``betas`` values of β in [beta_min, beta_max], ``systems`` clouds of ``tokens``
tokens uniform on S^{d−1} flow by the sphere model ẋ_i = P⊥_{x_i} Γ[μ](x_i), Γ softmax with
Q = K = V = I and score β⟨x, y⟩; the cluster density (share of pairs with ⟨x_i, x_j⟩ > 0.999,
mean over the systems) at ``checkpoints`` times in [0, t1], for d = 2 (their default) and
d = 3. Every β and system is one batch, advanced by one ``integrate`` call per checkpoint
interval (:mod:`._sphere_diagram`), RK4 with the tangent velocity, ``steps_per_checkpoint``
steps per interval (benchmarks/glpr.py measures its error against a dt → 0 reference and
compares GLPR's own Euler loop). Then, d = 3, β = ``cluster_beta``: ``cluster_seeds``
independent clouds, each stopped by the Clustered event (diameter < 1e-4) — one cluster for
every seed (GLPR's theorem for d ≥ 3).

(b) **Schemes**: the same initial tokens (``scheme_tokens`` uniform on S^{d−1}) under every
normalisation of :class:`~tpde.fields.Normalized` (post-ln, pre-ln, peri-ln, mix-ln with
the switch at half the horizon, ngpt with α = ``ngpt_alpha``, layernorm with γ = 1, b = 0)
of the same softmax field: angular clusters over time, the speed of the angular part θ = x/|x|
(mean over tokens of the angle swept between saves, per unit time), the effective rank of the
tokens' angular second moment Σ_i w_i θ_iθ_iᵀ (1: one cluster or an antipodal pair; d:
isotropic), and the mean radius |x|.

(c) **R^d against the sphere**: tokens drawn from N(0, I_d) under the same field in R^d (no
normalisation): the Gaussian moment ODE blows up at t* = 1/(2β λ_max(Σ₀)) (MATH.md §4), the
particles grow until tr Σ > 10³; the post-LN flow of the normalised tokens clusters instead.

A GIF shows one d = 2 post-LN cloud at β = ``movie_beta``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.fields import Normalized, Softmax
from tpde.fields.norms.schemes import SCHEMES, LayerNorm, NormScheme, scheme_from
from tpde.flows import BlowUp, Clustered, integrate
from tpde.measures import Empirical, Gaussian, uniform_on_sphere
from tpde.metrics import angular_cluster_count, clusters_over_time, time_to_single_cluster
from tpde.metrics.diagnostics import effective_rank

from . import _framework as fw
from ._sphere_diagram import (
    check_diagram_size,
    checkpoint_times,
    density_table,
    post_ln,
    systems_for,
)

NAME = "sphere"
#: The schemes of part (b), in the report's order (the quick run's summary lines name them).
SPHERE_SCHEMES = ("post-ln", "pre-ln", "peri-ln", "mix-ln", "ngpt", "layernorm")
TITLE = "Experiment 8 — normalised tokens: GLPR's phase diagram, LayerNorm schemes, blow-up"
F64 = torch.float64
DELTA = 1e-3  # GLPR: tokens i, j are clustered when ⟨x_i, x_j⟩ > 1 − δ = 0.999
BLOWUP_TRACE = 1e3


@dataclass(frozen=True)
class Config:
    systems: int = 2048  # per β (GLPR's batch)
    tokens: int = 32
    betas: int = 90
    beta_min: float = 0.1
    beta_max: float = 9.0
    t1: float = 30.0
    checkpoints: int = 200
    dims: tuple[int, ...] = (2, 3)
    steps_per_checkpoint: int = 1  # RK4 steps per checkpoint interval (30/199 ≈ 0.15)
    cluster_seeds: int = 20
    cluster_beta: float = 1.0
    cluster_dim: int = 3
    cluster_t1: float = 60.0
    schemes: tuple[str, ...] = SPHERE_SCHEMES
    scheme_tokens: int = 64
    scheme_dim: int = 3
    scheme_beta: float = 1.0
    scheme_t1: float = 30.0
    scheme_saves: int = 121
    scheme_dt: float = 0.05
    ngpt_alpha: float = 1.0
    blowup_tokens: int = 256
    blowup_dim: int = 3
    blowup_beta: float = 1.0
    blowup_t1: float = 15.0
    movie_beta: float = 4.0
    movie_frames: int = 61
    seed: int = 0

    def check(self) -> None:
        check_diagram_size(self.betas, self.systems, self.tokens)
        fw.check_choices("schemes", self.schemes, tuple(SCHEMES))
        if not self.dims or min(self.dims) < 2:
            raise ValueError(f"dims must be dimensions d >= 2 (tokens on S^(d-1)); received "
                             f"{self.dims}.")  # fmt: skip
        if min(self.checkpoints, self.scheme_saves, self.movie_frames) < 2:
            raise ValueError("checkpoints, scheme_saves and movie_frames must be >= 2.")
        if min(self.steps_per_checkpoint, self.cluster_seeds) < 1:
            raise ValueError("steps_per_checkpoint and cluster_seeds must be >= 1.")
        if self.cluster_dim < 3:
            raise ValueError(f"cluster_dim must be >= 3 (GLPR's one-cluster theorem is for "
                             f"d >= 3); received {self.cluster_dim}.")  # fmt: skip
        if (
            min(self.scheme_dim, self.blowup_dim) < 2
            or min(self.scheme_tokens, self.blowup_tokens) < 2
        ):
            raise ValueError("scheme_dim, blowup_dim, scheme_tokens and blowup_tokens must be "
                             ">= 2.")  # fmt: skip
        positive = ("t1", "cluster_t1", "scheme_t1", "scheme_dt", "ngpt_alpha", "blowup_t1",
                    "cluster_beta", "scheme_beta", "blowup_beta", "movie_beta")  # fmt: skip
        bad = [f"{k} = {getattr(self, k)}" for k in positive if not getattr(self, k) > 0]
        if bad:
            raise ValueError(f"these must be > 0: {', '.join(bad)}.")
        if not 0 <= self.beta_min <= self.beta_max:
            raise ValueError(f"need 0 <= beta_min <= beta_max; received {self.beta_min}, "
                             f"{self.beta_max}.")  # fmt: skip
        t_star = 1 / (2 * self.blowup_beta)  # Σ₀ = I: t* = 1/(2β λ_max(Σ₀))
        if self.blowup_t1 <= t_star:
            raise ValueError(
                f"blowup_t1 must exceed the blow-up time t* = 1/(2·blowup_beta) = {t_star:.3g} "
                f"of the R^d flow (part (c) compares the blow-up with clustering); received "
                f"blowup_t1 = {self.blowup_t1}."
            )
        if self.ngpt_alpha * self.scheme_dt > 1:
            raise ValueError(
                f"ngpt_alpha · scheme_dt must be <= 1 (nGPT's step x + αh(N(Γ) − x) moves "
                f"each token at most to N(Γ)); received {self.ngpt_alpha} · {self.scheme_dt} "
                f"= {self.ngpt_alpha * self.scheme_dt:.3g}."
            )

    def memory_bytes(self) -> int:
        """float64 arrays of the largest part: the phase diagram's betas · systems clouds
        (n² scores and ~6 RK4 copies of n × d each), the schemes' and the blow-up's saved
        clouds with their scores, the clustering seeds."""
        d = max(self.dims)
        diagram = self.betas * self.systems * self.tokens * (self.tokens + 6 * d)
        schemes = (
            len(self.schemes)
            * self.scheme_tokens
            * (self.scheme_tokens + self.scheme_saves * self.scheme_dim)
        )
        blowup = 3 * self.blowup_tokens * (self.blowup_tokens + 121 * self.blowup_dim)
        seeds = self.cluster_seeds * self.tokens * (self.tokens + 6 * self.cluster_dim)
        movie = self.tokens * (self.tokens + 2 * self.movie_frames)
        return 8 * max(diagram, schemes, blowup, seeds, movie)


QUICK = {
    "systems": "32",
    "betas": "12",
    "checkpoints": "60",
    "scheme_tokens": "32",
    "scheme_saves": "61",
    "scheme_dt": "0.2",
    "blowup_tokens": "128",
    "movie_frames": "16",
}


def _sa(beta: float, d: int) -> Softmax:
    eye = torch.eye(d, dtype=F64)
    return Softmax.from_interaction(beta * eye, eye)


# ---------------------------------------------------------------------- (a) phase diagram
def betas_of(config: Config) -> np.ndarray:
    return np.linspace(config.beta_min, config.beta_max, config.betas)


def first_time_above(times, table, level: float) -> np.ndarray:
    """Per row of ``table`` (nβ, T), the first time its value reaches ``level`` (NaN: never)."""
    reached = table >= level
    first = np.where(reached.any(-1), reached.argmax(-1), -1)
    return np.where(first >= 0, np.asarray(times)[np.maximum(first, 0)], np.nan)


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


def run_one_cluster(config: Config) -> dict:
    """d ≥ 3, β = cluster_beta: every seed's cloud stopped by Clustered(1e-4) (one batch)."""
    gen = fw.torch_generator(config.seed + 7)
    mu = uniform_on_sphere(config.tokens, config.cluster_dim, batch=(config.cluster_seeds,),
                           generator=gen)  # fmt: skip
    field = Normalized(_sa(config.cluster_beta, config.cluster_dim))
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
def scheme_field(scheme: str, beta: float, d: int, horizon: float, *, switch: float = 0.5,
                 alpha: float = 1.0) -> Normalized:  # fmt: skip
    """GLPR's softmax (Q = K = V = I, score β⟨x, y⟩) under ``scheme``: Mix-LN hands over at
    ``switch`` × ``horizon`` (its depth), nGPT steps by ``alpha`` (also the clustering sweep)."""
    return Normalized(_sa(beta, d), scheme_object(scheme, horizon, switch=switch, alpha=alpha))


def scheme_object(name: str, horizon: float, *, switch: float = 0.5, alpha: float = 1.0
                  ) -> NormScheme:  # fmt: skip
    """The scheme named ``name`` (a key of :data:`SCHEMES`) with this experiment's options:
    Mix-LN hands over at ``switch`` × ``horizon`` (its depth), nGPT steps by ``alpha``."""
    options = {
        "mix-ln": {"switch": switch * horizon, "depth": horizon},
        "ngpt": {"alpha": alpha},
    }.get(name, {})
    return scheme_from(name, options)


def scheme_start(field: Normalized, mu):
    """The start of a scheme's run: LayerNorm from the tokens after the model's own LayerNorm
    (BERT's embeddings end with one), so that no step is spent jumping onto its manifold;
    the others from ``mu``."""
    return mu.with_points(field.project(mu.points)) if isinstance(field.scheme, LayerNorm) else mu


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
    field = _sa(beta, d)
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
    traj = integrate(Normalized(_sa(config.movie_beta, 2)), mu, config.t1, method="dopri5",
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
    results["one_cluster"] = run_one_cluster(config)
    data, results["schemes"] = run_schemes(config)
    arrays.update(data)
    data, results["blowup"] = run_blowup(config)
    arrays.update(data)
    arrays.update(run_movie(config))
    fw.save(out, config, arrays, results, started)


# ---------------------------------------------------------------------- figures
def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    config, arrays, _ = fw.load(out)
    files = [_plot_diagram(plt, out, config, arrays), _plot_schemes(plt, out, config, arrays),
             _plot_blowup(plt, out, arrays), _animate(out, arrays, config)]  # fmt: skip
    return files


def _plot_diagram(plt, out, config, arrays) -> Path:
    dims = config["dims"]
    fig, axes = plt.subplots(1, len(dims), figsize=(5.5 * len(dims), 4.2), squeeze=False)
    for ax, d in zip(axes[0], dims, strict=True):
        mesh = ax.pcolormesh(arrays["times"], arrays["betas"], arrays[f"density_d{d}"],
                             cmap="RdBu_r", vmin=0, vmax=1, shading="nearest",
                             rasterized=True)  # fmt: skip
        fig.colorbar(mesh, ax=ax, label="cluster density")
        ax.set_xlabel("t")
        ax.set_ylabel("β")
        ax.set_title(f"d = {d}: {config['systems']} systems × {config['tokens']} tokens per β")
    fig.tight_layout()
    return fw.savefig(fig, out / "sphere_phase_diagram.png")


def _plot_schemes(plt, out, config, arrays) -> Path:
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    panels = (("clusters", "angular clusters (⟨θ_i, θ_j⟩ > 0.999)", "linear"),
              ("speed", "speed of the angular part |θ̇|", "log"),
              ("erank", "effective rank of Σ w θθᵀ", "linear"),
              ("radius", "mean radius |x|", "log"))  # fmt: skip
    for i, scheme in enumerate(config["schemes"]):
        times = arrays[f"scheme__{scheme}__times"]
        for ax, (key, _, _) in zip(axes, panels, strict=True):
            values = arrays[f"scheme__{scheme}__{key}"]
            t = 0.5 * (times[1:] + times[:-1]) if key == "speed" else times
            style = "--" if scheme in ("pre-ln", "peri-ln", "mix-ln") else "-"
            ax.plot(t, values, style, color=f"C{i}", label=scheme)
    for ax, (_, title, scale) in zip(axes, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_yscale(scale)
        ax.set_xlabel("t")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"the same {config['scheme_tokens']} tokens on S^{config['scheme_dim'] - 1}, "
        f"softmax Q = K = V = I, β = {config['scheme_beta']:g}; dashed: tokens in R^d"
    )
    fig.tight_layout()
    return fw.savefig(fig, out / "sphere_schemes.png")


def _plot_blowup(plt, out, arrays) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    axes[0].semilogy(arrays["blowup__ode_times"], arrays["blowup__ode_trace"], label="Gaussian ODE")
    axes[0].semilogy(arrays["blowup__particle_times"], arrays["blowup__particle_trace"], "--",
                     label="particles in R^d")  # fmt: skip
    axes[0].set_title("tr Σ (R^d, no normalisation)")
    axes[1].plot(arrays["blowup__particle_times"], arrays["blowup__particle_clusters"], "--",
                 label="R^d particles (angles)")  # fmt: skip
    axes[1].plot(arrays["blowup__sphere_times"], arrays["blowup__sphere_clusters"],
                 label="post-LN on the normalised tokens")  # fmt: skip
    axes[1].set_title("angular clusters")
    for ax in axes:
        ax.set_xlabel("t")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fw.savefig(fig, out / "sphere_blowup.png")


def _animate(out, arrays, config) -> Path:
    from tpde.plot import animate

    clouds = [Empirical(torch.as_tensor(p, dtype=F64)) for p in arrays["movie__points"]]
    return animate(clouds, out / "sphere_flow.gif", times=arrays["movie__times"],
                   title=f"post-LN, d = 2, β = {config['movie_beta']:g}", xlim=(-1.15, 1.15),
                   ylim=(-1.15, 1.15), fps=6)  # fmt: skip


# ---------------------------------------------------------------------- report
def _cell(value, fmt: str = ".3g") -> str:
    return "—" if value is None or not np.isfinite(value) else format(value, fmt)


def _diagram_table(config, arrays, results) -> str:
    betas, times = arrays["betas"], arrays["times"]
    picks = sorted({0, len(betas) // 4, len(betas) // 2, 3 * len(betas) // 4, len(betas) - 1})
    marks = [t for t in (1.0, 5.0, 10.0) if t < config["t1"]] + [config["t1"]]
    header = ["d", "β"] + [f"density at t = {t:g}" for t in marks] + ["t (density ≥ 0.5)",
                                                                      "t (≥ 0.99)"]  # fmt: skip
    rows = []
    for d in config["dims"]:
        table, r = arrays[f"density_d{d}"], results[f"diagram_d{d}"]
        for b in picks:
            cols = [int(np.argmin(np.abs(times - t))) for t in marks]
            rows.append([d, f"{betas[b]:.2f}", *(f"{table[b, c]:.3f}" for c in cols),
                         _cell(r["t_half"][b]), _cell(r["t_99"][b])])  # fmt: skip
    return "Cluster density by β and t (mean over the systems):\n\n" + fw.markdown_table(
        header, rows
    )


def _scheme_table(config, results) -> str:
    header = ["scheme", "time to one cluster", "clusters at the end", "effective rank at the end",
              "mean angular speed, first half", "radius at the end"]  # fmt: skip
    rows = [[s, _cell(r["time_to_one_cluster"]), r["final_clusters"], _cell(r["final_erank"]),
             _cell(r["mean_speed_first_half"]), _cell(r["final_radius"])]
            for s, r in results["schemes"].items()]  # fmt: skip
    return (
        f"The same tokens under each scheme (t ≤ {config['scheme_t1']:g}; times to one "
        "cluster at the resolution of the saves):\n\n" + fw.markdown_table(header, rows)
    )


def _claims_diagram(config, results) -> list[fw.Claim]:
    claims = []
    for d in config["dims"]:
        r = results[f"diagram_d{d}"]
        final = np.asarray(r["final_density"])
        t_half = np.asarray(r["t_half"], dtype=float)
        finite = np.isfinite(t_half)
        order = np.corrcoef(np.arange(len(t_half))[finite], t_half[finite])[0, 1] \
            if finite.sum() > 2 else float("nan")  # fmt: skip
        claims.append(fw.Claim(
            f"d = {d}: small β gather into one cluster fast; the larger β, the longer the "
            "tokens stay in several clusters (GLPR's phase diagram, metastability)",
            f"density at t = {config['t1']:g}: {final[0]:.3f} at β = {config['beta_min']:g}, "
            f"{final[-1]:.3f} at β = {config['beta_max']:g}; time to density 0.5 rises with β "
            f"(correlation {order:.2f} over the β that reach it, {int(finite.sum())} of "
            f"{len(t_half)})",
            "agrees" if final[0] > 0.99 and final[-1] < final[0] and order > 0.5 else "differs",
        ))  # fmt: skip
    one = results["one_cluster"]
    clustered = one["status"].get("clustered", 0)
    seeds = config["cluster_seeds"]
    times = np.asarray(one["event_time"], dtype=float)
    claims.append(fw.Claim(
        f"d = {config['cluster_dim']} (≥ 3), Q = K = V = I, β = {config['cluster_beta']:g}, "
        f"{config['tokens']} uniform tokens: one cluster in long time for every start (GLPR)",
        f"{clustered} of {seeds} seeds reach diameter < 1e-4 by t = {config['cluster_t1']:g} "
        f"(times {np.nanmin(times):.1f}–{np.nanmax(times):.1f}); norms stay 1 to "
        f"{one['norm_error']:.1e}",
        "agrees" if clustered == seeds else "differs",
    ))  # fmt: skip
    return claims


def _time(value) -> float:
    """A saved time (NaN is saved as null: never)."""
    return math.nan if value is None else float(value)


def _claims_schemes(config, arrays, results) -> list[fw.Claim]:
    r = results["schemes"]
    claims = []
    if "post-ln" in r and "pre-ln" in r:
        post, pre = _time(r["post-ln"]["time_to_one_cluster"]), r["pre-ln"]
        later = _time(pre["time_to_one_cluster"])
        slower = not math.isfinite(later) or later > post
        claims.append(fw.Claim(
            "Pre-LN regulates speed: the radii grow (ṙ = ⟨θ, Γ⟩) and the angle moves at "
            "|P⊥Γ|/r, so the tokens cluster later than under Post-LN (Karagodin et al.; MATH.md "
            "§7 [ours])",
            f"radius at the end {pre['final_radius']:.3g}; one cluster "
            + (f"at t = {later:.3g}" if math.isfinite(later) else
               f"not reached by t = {config['scheme_t1']:g}")
            + f" (post-LN: at t = {_cell(post)})",
            "agrees" if slower and pre["final_radius"] > 1 else "differs",
        ))  # fmt: skip
    sphere = [s for s in ("post-ln", "ngpt") if s in r]
    if sphere:
        worst = max(r[s]["max_norm_error"] for s in sphere)
        claims.append(fw.Claim(
            "Post-LN and nGPT keep the tokens on the unit sphere",
            f"| |x| − 1 | ≤ {worst:.1e} along {', '.join(sphere)}",
            "agrees" if worst < 1e-10 else "differs",
        ))  # fmt: skip
    if "ngpt" in r:
        fastest = float(arrays["scheme__ngpt__speed"].max())
        alpha = config["ngpt_alpha"]
        claims.append(fw.Claim(
            f"nGPT moves the tokens along the sphere no faster than its step α = {alpha:g} "
            "(ẋ = α P⊥_x N(Γ))",
            f"largest mean angular speed between saves: {fastest:.3g}",
            "agrees" if fastest <= alpha * (1 + 1e-9) else "differs",
        ))  # fmt: skip
    if "mix-ln" in r:
        times, radius = arrays["scheme__mix-ln__times"], arrays["scheme__mix-ln__radius"]
        switch = config["scheme_t1"] / 2
        before = float(np.abs(radius[times <= switch] - 1).max())
        claims.append(fw.Claim(
            f"Mix-LN is Post-LN before its switch (t = {switch:g}) and Pre-LN after: the "
            "tokens leave the sphere only after it",
            f"| mean |x| − 1 | ≤ {before:.1e} up to the switch; radius {radius[-1]:.3g} at "
            f"t = {times[-1]:g}",
            "agrees" if before < 1e-10 and radius[-1] > 1 else "differs",
        ))  # fmt: skip
    return claims


def report(out: Path) -> fw.Report:
    config, arrays, results = fw.load(out)
    claims = _claims_diagram(config, results) + _claims_schemes(config, arrays, results)
    b = results["blowup"]
    turned = b["ode_status"] == "blow_up" and math.isfinite(_time(b["sphere_time_to_one_cluster"]))
    claims.append(fw.Claim(
        f"Normalisation turns blow-up into clustering: softmax Q = K = V = I, β = "
        f"{config['blowup_beta']:g} blows up in R^{config['blowup_dim']} from N(0, I) at "
        f"t* = 1/(2β) = {b['t_star']:.3g}; its post-LN version clusters",
        f"Gaussian ODE: {b['ode_status']} at t = {b['ode_event_time']:.4g}; particles: "
        f"{b['particle_status']} (tr Σ > {BLOWUP_TRACE:g}) at t = {b['particle_event_time']:.3g} "
        f"with {b['particle_clusters_at_event']} angular clusters; post-LN: one cluster at t = "
        f"{_cell(b['sphere_time_to_one_cluster'])} ({b['sphere_final_clusters']} at the end)",
        "agrees" if turned else "differs",
    ))  # fmt: skip
    sizes = ", ".join(
        f"d = {d}: {results[f'diagram_d{d}']['seconds']:.0f} s, "
        f"{results[f'diagram_d{d}']['rhs']} field evaluations"
        for d in config["dims"]
    )
    summary = (
        f"Phase diagrams of {config['betas']} β × {config['systems']} systems × "
        f"{config['tokens']} tokens to t = {config['t1']:g} ({sizes}); "
        f"{results['one_cluster']['status'].get('clustered', 0)}/{config['cluster_seeds']} "
        f"seeds form one cluster in d = {config['cluster_dim']}; {len(config['schemes'])} "
        "normalisation schemes from the same tokens; R^d blow-up vs post-LN clustering."
    )
    figures = [
        ("sphere_phase_diagram.png", "Cluster density over β × t (GLPR's phase diagram)."),
        ("sphere_schemes.png", "The same tokens under each normalisation scheme."),
        ("sphere_blowup.png", "R^d blow-up against post-LN clustering from the same start."),
        ("sphere_flow.gif", f"A post-LN cloud on the circle, β = {config['movie_beta']:g} "
                            "(tpde.plot.animate)."),
    ]  # fmt: skip
    notes = [
        "Largest Monte-Carlo standard error of a density cell: "
        + ", ".join(f"d = {d}: {results[f'diagram_d{d}']['max_se']:.2g}" for d in config["dims"])
        + ". benchmarks/glpr.py compares the table with a port of GLPR's Euler loop and "
        "measures its discretisation error.",
        "Layernorm (γ = 1, b = 0) puts the tokens on the sphere of radius √d in the centred "
        "hyperplane: its scores β⟨x, y⟩ reach βd, a different effective β, and its angles live "
        "on a great circle (d = 3).",
        "Effective rank: exp of the entropy of the eigenvalues of Σ_i w_i θ_iθ_iᵀ "
        "(tpde.metrics.diagnostics.effective_rank of that matrix).",
    ]
    tables = [_diagram_table(config, arrays, results), _scheme_table(config, results)]
    return fw.Report(summary, claims, figures, tables, notes)
