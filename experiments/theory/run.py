"""The computations of the ``theory`` study (package notes; part 2 on S² in :mod:`.sphere`).

Each ``part*`` function takes the study's config and returns (arrays, results): the arrays
go to data.npz, the results (plain numbers) to meta.json. Every random draw goes through a
seeded generator; every batch of independent systems is one tensor (Empirical points
(..., n, d)) and one ``integrate`` call.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from tpde.fields import Field, Hardmax, Masked, Normalized, Softmax
from tpde.flows import Clustered, integrate
from tpde.measures import Empirical, uniform_on_sphere
from tpde.metrics import angular_cluster_count
from tpde.theory import (
    SCHEMES_WITH_LAW,
    dominant_mode,
    equiangular_frame,
    equiangular_solution,
    hardmax_vertices,
    instability_rate,
    renyi_centres,
)

from .. import framework as fw
from ..common.kernels import fourier_modes, kernel_field, time_scale
from ..common.schemes import scheme_object
from .config import F64, Config
from .rates import random_rates, rate_results
from .sphere import part_sphere


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    arrays, results = {}, {}
    for name, part in (("equiangular", part1), ("instability", part2),
                       ("instability_s2", part_sphere), ("causal", part3),
                       ("hardmax", part4), ("sync", part5)):  # fmt: skip
        tic = time.perf_counter()
        data, summary = part(config)
        arrays.update(data)
        results[name] = {**summary, "part_seconds": time.perf_counter() - tic}
    fw.save(out, config, arrays, results, started)


# ---------------------------------------------------------------------- part 1
def _gram(points: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(off-diagonal inner products of the directions (T, n(n−1)), radii (T, n))."""
    radius = points.norm(dim=-1)
    theta = points / radius.unsqueeze(-1)
    return (theta @ theta.mT)[:, ~torch.eye(n, dtype=torch.bool)], radius


def _equiangular_run(config, scheme: str, kernel: str, n: int, times) -> dict:
    d = n + 1
    rho0 = -0.5 / (n - 1)
    frame = equiangular_frame(n, d, rho0, generator=fw.torch_generator(config.seed + n))
    scheme_obj = scheme_object(scheme, config.eq_t1, switch=0.5, alpha=config.ngpt_alpha)
    field = Normalized(kernel_field(kernel, config.eq_beta, d), scheme_obj)
    start = time.perf_counter()
    traj = integrate(field, Empirical(frame), config.eq_t1, method="dopri5", rtol=config.eq_rtol,
                     atol=config.eq_rtol * 1e-2, save=times.tolist(), events=())  # fmt: skip
    seconds = time.perf_counter() - start
    off, radius = _gram(torch.stack([m.points for m in traj.measures]), n)
    law = equiangular_solution(times, rho0, beta=config.eq_beta, n=n, scheme=scheme,
                               kernel=kernel, alpha=config.ngpt_alpha,
                               switch=getattr(scheme_obj, "switch", None))  # fmt: skip
    return {
        "rho": off.mean(-1).numpy(), "law_rho": law.rho, "law_r": law.r,
        "rho_error": float((off - torch.as_tensor(law.rho)[:, None]).abs().max()),
        "r_error": float((radius - torch.as_tensor(law.r)[:, None]).abs().max()),
        "spread": float((off.amax(-1) - off.amin(-1)).max()), "seconds": seconds,
    }  # fmt: skip


def _layernorm_run(config, n: int, times) -> dict:
    """LayerNorm (γ = 1, b = 0, ε = 1e-300) from an equiangular frame of the centred sphere
    of radius √d, d = n + 1, at steps h and h/2 (RK4), against its h → 0 limit: the post-LN
    law with β_eff = β_score·d (β_score = eq_beta/d, so β_eff = eq_beta)."""
    d = n + 1
    rho0 = -0.5 / (n - 1)
    frame = equiangular_frame(n, n, rho0, generator=fw.torch_generator(config.seed + n))
    basis = torch.linalg.svd(torch.eye(d, dtype=F64) - 1.0 / d)[0][:, : d - 1]  # 1^⊥
    start_points = math.sqrt(d) * frame @ basis.T
    eye = torch.eye(d, dtype=F64)
    field = Normalized(Softmax.from_interaction(config.eq_beta / d * eye, eye), "layernorm",
                       eps=1e-300)  # fmt: skip
    law = equiangular_solution(times, rho0, beta=config.eq_beta, n=n, scheme="post-ln")
    rhos = []
    for h in (config.ln_dt, config.ln_dt / 2):
        traj = integrate(field, Empirical(start_points), config.eq_t1, dt=h, method="rk4",
                         save=times.tolist(), events=())  # fmt: skip
        rhos.append(_gram(torch.stack([m.points for m in traj.measures]), n)[0].mean(-1).numpy())
    errors = [float(np.abs(r - law.rho).max()) for r in rhos]
    richardson = float(np.abs(2 * rhos[1] - rhos[0] - law.rho).max())
    return {"errors": errors, "order": math.log2(errors[0] / errors[1]),
            "richardson": richardson, "rho": rhos[1]}  # fmt: skip


def part1(config) -> tuple[dict, dict]:
    times = np.linspace(0.0, config.eq_t1, config.eq_saves)
    arrays, results = {"eq_times": times}, {}
    for kernel in config.kernels:
        for scheme in SCHEMES_WITH_LAW:
            for n in config.eq_ns:
                run = _equiangular_run(config, scheme, kernel, n, times)
                key = f"{kernel}/{scheme}/{n}"
                arrays[f"eq__{kernel}__{scheme}__{n}__rho"] = run.pop("rho")
                arrays[f"eq__{kernel}__{scheme}__{n}__law"] = run.pop("law_rho")
                arrays[f"eq__{kernel}__{scheme}__{n}__law_r"] = run.pop("law_r")
                results[key] = run
    for n in config.eq_ns:
        run = _layernorm_run(config, n, times)
        arrays[f"eq__ln__{n}__rho"] = run.pop("rho")
        results[f"layernorm/{n}"] = run
    return arrays, results


# ---------------------------------------------------------------------- part 2
def _random_protocol(config, kernel: str, beta: float) -> dict:
    """N i.i.d. uniform tokens on S¹, S seeds batched; |m_k|², rates from the linear window."""
    modes = np.arange(1, config.inst_modes + 1)
    return random_rates(
        kernel, beta, d=2, modes=config.inst_modes, tokens=config.inst_tokens,
        seeds=config.inst_seeds, level=config.inst_level, saves=config.inst_saves,
        steps=config.inst_steps, seed=config.seed + 1000 + int(100 * beta),
        power=lambda points: fourier_modes(points, modes).abs().square().numpy(),
    )  # fmt: skip


def _lattice_protocol(config, kernel: str) -> dict:
    """N_L lattice tokens θ_j = 2πj/N_L + δ sin(kφ_j) (mode k alone, amplitude ~kδ/2); every
    (β, k) one batch element; λ̂_k = log(|m_k(T)|/|m_k(0)|)/T, T = 1 (rescaled time)."""
    betas = np.arange(1.0, config.lat_beta_max + 1)
    modes = np.arange(1, config.lat_modes + 1)
    phi = 2 * np.pi * np.arange(config.lat_tokens) / config.lat_tokens
    theta = phi + config.lat_delta * np.sin(modes[:, None] * phi)  # (K, N)
    points = np.broadcast_to(np.stack([np.cos(theta), np.sin(theta)], -1),
                             (len(betas), len(modes), config.lat_tokens, 2))  # fmt: skip
    field = Normalized(kernel_field(kernel, betas, 2, rescale=True))
    start = time.perf_counter()
    traj = integrate(field, Empirical(torch.as_tensor(points.copy())), 1.0, dt=0.05,
                     method="rk4", events=())  # fmt: skip
    seconds = time.perf_counter() - start
    own = torch.as_tensor(modes).reshape(1, -1, 1)  # each element's own mode k
    z0, z1 = (torch.complex(m.points[..., 0], m.points[..., 1]) for m in traj.measures)
    m0, m1 = ((z.conj() ** own).mean(-1) for z in (z0, z1))
    scale = time_scale(kernel, betas)
    measured = torch.log(m1.abs() / m0.abs()).numpy() / scale
    predicted = np.stack([instability_rate(modes, b, kernel=kernel) for b in betas])
    return {"betas": betas, "measured": measured, "predicted": predicted, "seconds": seconds,
            "dominant": modes[np.argmax(measured, -1)],
            "dominant_theory": np.array([dominant_mode(b) for b in betas])}  # fmt: skip


def part2(config) -> tuple[dict, dict]:
    arrays, results = {}, {}
    for kernel in config.inst_kernels:
        lat = _lattice_protocol(config, kernel)
        for key in ("betas", "measured", "predicted", "dominant", "dominant_theory"):
            arrays[f"lat__{kernel}__{key}"] = lat[key]
        pick = [int(b) - 1 for b in config.inst_betas if b <= config.lat_beta_max]
        k = min(6, config.lat_modes)
        rel = np.abs(lat["measured"][pick, :k] / lat["predicted"][pick, :k] - 1)
        results[f"lattice/{kernel}"] = {
            "max_rel_error": float(rel.max()) if rel.size else math.nan,
            "dominant_right": int((lat["dominant"] == lat["dominant_theory"]).sum()),
            "betas": len(lat["betas"]), "seconds": lat["seconds"],
        }  # fmt: skip
        for beta in config.inst_betas:
            run = _random_protocol(config, kernel, beta)
            tag = f"inst__{kernel}__{beta:g}"
            for key in ("predicted", "measured", "se", "power", "times"):
                arrays[f"{tag}__{key}"] = run[key]
            results[f"random/{kernel}/{beta:g}"] = rate_results(run)
    return arrays, results


# ---------------------------------------------------------------------- part 3
def _sequence(points: torch.Tensor) -> Empirical:
    n = points.shape[-2]
    return Empirical(points, positions=torch.linspace(0.0, 1.0, n, dtype=F64))


def part3(config) -> tuple[dict, dict]:
    arrays, results = {}, {}
    S, n = config.causal_seeds, config.causal_tokens
    for d in config.causal_dims:
        gen = fw.torch_generator(config.seed + 3000 + d)
        Q = torch.randn(S, d, d, generator=gen, dtype=F64)
        K = torch.randn(S, d, d, generator=gen, dtype=F64)
        mu = _sequence(uniform_on_sphere(n, d, batch=(S,), generator=gen).points)
        field = Normalized(Masked(Softmax(Q, K, torch.eye(d, dtype=F64))), "post-ln")
        start = time.perf_counter()
        traj = integrate(field, mu, config.causal_t1, method="dopri5", rtol=1e-9, atol=1e-12,
                         events=(Clustered(config.causal_tol),), max_steps=200_000)  # fmt: skip
        final = traj.final.points
        moved = (final[:, 0] - mu.points[:, 0]).norm(dim=-1)
        spread = (final - final[:, :1]).norm(dim=-1).amax(-1)
        arrays[f"causal__{d}__moved"] = moved.numpy()
        arrays[f"causal__{d}__spread"] = spread.numpy()
        arrays[f"causal__{d}__time"] = traj.event_time.numpy()
        results[f"causal/{d}"] = {
            "first_moved": float(moved.max()), "spread": float(spread.max()),
            "clustered": int((np.asarray(traj.status).astype(str) == "clustered").sum()),
            "time_max": float(np.nanmax(traj.event_time.numpy())),
            "seconds": time.perf_counter() - start,
        }  # fmt: skip
    # Large β, Q = K = V = I_2: the metastable centres against Rényi's parking (KPR §5).
    beta, n, S = config.renyi_beta, config.renyi_tokens, config.renyi_seeds
    gen = fw.torch_generator(config.seed + 3100)
    mu = _sequence(uniform_on_sphere(n, 2, batch=(S,), generator=gen).points)
    field = Normalized(Masked(kernel_field("sa", beta, 2)), "post-ln")
    times = [0.0, *config.renyi_times]
    traj = integrate(field, mu, times[-1], method="dopri5", rtol=1e-7, atol=1e-10, save=times,
                     events=())  # fmt: skip
    counts = np.stack([angular_cluster_count(m, 1e-3).numpy() for m in traj.measures])
    delta = config.renyi_delta / math.sqrt(beta)
    renyi = np.array([len(renyi_centres(mu.points[s], delta)) for s in range(S)])
    strong = np.array([len(renyi_centres(mu.points[s], delta, strong=True)) for s in range(S)])
    arrays.update({"renyi__times": np.asarray(times), "renyi__counts": counts,
                   "renyi__centres": renyi, "renyi__strong": strong})  # fmt: skip
    results["renyi"] = {"delta": delta}
    return arrays, results


# ---------------------------------------------------------------------- part 4
class FrankWolfe(Field):
    """ẋ = Γ[μ](x) − x: the attention layer x ← x + h(Γ − x) as h → 0, Alcalde et al.'s
    Frank-Wolfe form of zero-temperature attention (V = I: each token moves straight to
    the convex combination Γ of the tokens)."""

    def __init__(self, field: Field):
        self.field, self.dim = field, field.dim

    def children(self) -> tuple[Field, ...]:
        return (self.field,)

    @property
    def time_dependent(self) -> bool:
        return self.field.time_dependent

    def particle_velocity(self, t, mu, x, engine, info=None):
        return self.field.particle_velocity(t, mu, x, engine, info) - x


def hardmax_start(config):
    """(points (S, m + k, d), A (S, d, d)): m vertices on the ellipse xᵀAx = 1 at jittered
    equal angles (every vertex is its own maximiser: ⟨Av, w⟩ ≤ |v|_A|w|_A = 1), then k
    interior tokens, Dirichlet(1) combinations of them; A = GᵀG + I/10, G Gaussian."""
    S, m, k, d = config.hard_seeds, config.hard_vertices, config.hard_interior, 2
    gen = fw.torch_generator(config.seed + 4000)
    G = torch.randn(S, d, d, generator=gen, dtype=F64)
    A = G.mT @ G + 0.1 * torch.eye(d, dtype=F64)
    jitter = (torch.rand(S, m, generator=gen, dtype=F64) - 0.5) * 0.4
    angle = 2 * math.pi * (torch.arange(m, dtype=F64) + jitter) / m
    circle = torch.stack([angle.cos(), angle.sin()], -1)
    values, vectors = torch.linalg.eigh(A)
    inv_sqrt = vectors @ torch.diag_embed(values.rsqrt()) @ vectors.mT
    vertices = circle @ inv_sqrt.mT  # A^{-1/2} of the unit circle: on xᵀAx = 1
    weights = -torch.log(torch.rand(S, k, m, generator=gen, dtype=F64))
    interior = (weights / weights.sum(-1, keepdim=True)) @ vertices
    return torch.cat([vertices, interior], 1), A


def part4(config) -> tuple[dict, dict]:
    points, A = hardmax_start(config)
    m, eye = config.hard_vertices, torch.eye(2, dtype=F64)
    rule = [hardmax_vertices(points[s], A[s]) for s in range(points.shape[0])]
    predicted = torch.stack([r[0] for r in rule])[:, m:]
    valid = bool(torch.stack([r[1] for r in rule]).all())

    def judge(final):
        distance = torch.cdist(final[:, m:], points[:, :m])
        per_seed = (distance.argmin(-1) == predicted).double().mean(-1)
        return per_seed, distance.amin(-1)

    start = time.perf_counter()
    hard = integrate(FrankWolfe(Hardmax.from_interaction(A, eye)), Empirical(points),
                     config.hard_t1, dt=0.05, method="rk4", events=()).final.points  # fmt: skip
    hard_seconds = time.perf_counter() - start
    share, gap = judge(hard)
    arrays = {"hard__betas": np.asarray(config.hard_betas, dtype=float),
              "hard__share_hardmax": share.numpy()}  # fmt: skip
    right = int((torch.cdist(hard[:, m:], points[:, :m]).argmin(-1) == predicted).sum())
    results = {"hardmax": {"share": float(share.mean()), "valid": valid, "right": right,
                           "max_distance": float(gap.max()), "seconds": hard_seconds}}  # fmt: skip
    shares, deviation = [], []
    for beta in config.hard_betas:
        soft = integrate(FrankWolfe(Softmax.from_interaction(beta * A, eye)), Empirical(points),
                         config.hard_t1, method="dopri5", rtol=1e-8, atol=1e-10,
                         events=()).final.points  # fmt: skip
        shares.append(judge(soft)[0].numpy())
        deviation.append((soft - hard).norm(dim=-1).mean(-1).numpy())  # per seed
    arrays["hard__share_softmax"] = np.stack(shares)  # (nβ, S)
    arrays["hard__deviation"] = np.stack(deviation)  # (nβ, S)
    return arrays, results


# ---------------------------------------------------------------------- part 5
def part5(config) -> tuple[dict, dict]:
    betas = np.asarray(config.sync_betas, dtype=float)
    field = Normalized(kernel_field("usa", betas, 2, rescale=True))
    synced, clusters, moving = [], [], []
    start = time.perf_counter()
    for n in config.sync_ns:
        gen = fw.torch_generator(config.seed + 5000 + n)
        mu = uniform_on_sphere(n, 2, batch=(len(betas), config.sync_seeds), generator=gen)
        traj = integrate(field, mu, config.sync_t1, method="dopri5", rtol=1e-8, atol=1e-10,
                         events=(Clustered(1e-4),), max_steps=50_000)  # fmt: skip
        status = np.asarray(traj.status).astype(str)
        synced.append((status == "clustered").sum(-1))
        clusters.append(angular_cluster_count(traj.final, 1e-3).numpy())
        speed = field.velocity(traj.final).norm(dim=-1).amax(-1).numpy()
        moving.append(((status != "clustered") & (speed > 1e-8)).sum(-1))
    arrays = {"sync__betas": betas, "sync__ns": np.asarray(config.sync_ns),
              "sync__synced": np.stack(synced), "sync__moving": np.stack(moving),
              "sync__clusters": np.stack(clusters)}  # fmt: skip
    return arrays, {"seconds": time.perf_counter() - start}
