"""Experiment 5: JKO vs the explicit flow — convergence in τ, energy along the JKO sequence.

Where attention is a gradient flow (MATH.md §5) the JKO scheme
μ_{k+1} ∈ argmin_ν G(ν) + d(ν, μ_k)²/(2τ) converges to the explicit flow at order 1 in τ
and never increases G. Four cases, one per geometry of :func:`tpde.flows.jko_flow`:

- ``w2`` (particles): softmax with V = I, A ≺ 0 symmetric (the PDE descends G = E); the
  JKO limit in W2 is the W2 gradient flow of G (:class:`tpde.fields.GradientFlowField`);
- ``twisted`` (particles): the same field in its own twisted metric; the limit is the
  softmax PDE itself;
- ``bures`` (Gaussians): Sinkhorn with A symmetric, V = A (mobility M = I); the limit is
  the Sinkhorn Gaussian ODE;
- ``twisted-bures`` (Gaussians): Sinkhorn with V = MA, M ≠ I SPD: the M-twisted Bures JKO.

Errors at t₁ against an RK4 reference: RMS particle distance, or the Bures distance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.fields import GradientFlowField, Sinkhorn, Softmax
from tpde.fields.gradient_flow.energies import as_energy
from tpde.flows import integrate, jko_flow
from tpde.flows.compare import fit_rate
from tpde.measures import Empirical, Gaussian
from tpde.metrics import bures_wasserstein

from . import framework as fw

NAME = "jko"
ORDER = 5  # place in ``tpde run`` and in the report
TITLE = "JKO vs explicit flow: convergence in τ, energy along JKO"
GEOMETRIES = ("w2", "twisted", "bures", "twisted-bures")
F64 = torch.float64
A_DESCENT = ((-0.5, -0.15), (-0.15, -0.4))  # symmetric negative definite: V = I descends E
A_SINKHORN = ((0.6, 0.2), (0.2, -0.4))  # symmetric indefinite
MOBILITY = ((1.0, 0.3), (0.3, 0.5))


@dataclass(frozen=True)
class Config:
    geometries: tuple[str, ...] = GEOMETRIES
    taus: tuple[float, ...] = (0.2, 0.1, 0.05, 0.025, 0.0125)
    t1: float = 1.0
    n: int = 64  # particles
    reference_dt: float = 0.002
    seed: int = 0

    def check(self) -> None:
        fw.check_choices("geometries", self.geometries, GEOMETRIES)
        if len(self.taus) < 2 or min(self.taus) <= 0 or self.t1 <= 0 or self.n < 2:
            raise ValueError("taus needs two values > 0, t1 > 0 and n >= 2.")
        if not 0 < self.reference_dt <= self.t1:
            raise ValueError("reference_dt must lie in (0, t1].")
        if len(set(self.taus)) != len(self.taus):
            raise ValueError(
                f"taus must not repeat: the rate and the last pair's slope are fits of log error "
                f"against log τ over different τ; received {self.taus}."
            )

    def memory_bytes(self) -> int:
        """float64 n × n matrices of each JKO step (~8 with the inner solve's gradients), the
        saved steps of the finest τ and of the reference flow (n × 2 each)."""
        steps = self.t1 / min(self.taus) + self.t1 / self.reference_dt
        return 8 * (8 * self.n**2 + int(steps) * 2 * self.n)


QUICK = {"taus": "0.2,0.1,0.05,0.025", "n": "32"}


def setup(geometry: str, config: Config):
    """(field, initial measure, explicit reference field) of one geometry."""
    eye = torch.eye(2, dtype=F64)
    if geometry in ("w2", "twisted"):
        field = Softmax.from_interaction(torch.tensor(A_DESCENT, dtype=F64), eye)
        gen = fw.torch_generator(config.seed)
        mu = Empirical(torch.randn(config.n, 2, generator=gen, dtype=F64))
        return field, mu, GradientFlowField(field) if geometry == "w2" else field
    M = eye if geometry == "bures" else torch.tensor(MOBILITY, dtype=F64)
    A = torch.tensor(A_SINKHORN, dtype=F64)
    field = Sinkhorn(A, eye, M @ A, scale=1.0, tol=1e-11)
    g0 = Gaussian(torch.tensor([0.5, -0.3], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]]))
    return field, g0, field


def _error(mu, target) -> float:
    if isinstance(mu, Gaussian):
        return float(bures_wasserstein(mu, target))
    return float(((mu.points - target.points) ** 2).sum(-1).mean().sqrt())


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    arrays, results = {}, {}
    for geometry in fw.progress(config.geometries, "jko"):
        field, mu0, reference = setup(geometry, config)
        steps = max(1, round(config.t1 / config.reference_dt))
        saves = round(config.t1 / min(config.taus)) + 1
        explicit = integrate(reference, mu0, config.t1, dt=config.t1 / steps, method="rk4",
                             save=saves)  # fmt: skip
        G = as_energy(field)
        errors, seconds, monotone = [], [], []
        for tau in config.taus:
            clock = time.perf_counter()
            traj = jko_flow(mu0, field, tau, config.t1, geometry)
            seconds.append(time.perf_counter() - clock)
            errors.append(_error(traj.final, explicit.final))
            energy = traj.stats["energy"].numpy()
            monotone.append(bool(np.all(np.diff(energy) <= 1e-12 * np.abs(energy).max())))
            arrays[f"{geometry}__energy__{tau:g}"] = energy
            arrays[f"{geometry}__times__{tau:g}"] = traj.times.numpy()
            if traj.status != "completed":
                results.setdefault("failures", []).append(f"{geometry} τ={tau}: {traj.status}")
        arrays[f"{geometry}__errors"] = np.array(errors)
        arrays[f"{geometry}__explicit_times"] = explicit.times.numpy()
        arrays[f"{geometry}__explicit_energy"] = np.array(
            [float(G(m, "auto").detach()) for m in explicit.measures]
        )
        results[geometry] = {
            "rate": fit_rate(config.taus, errors),
            "last_slope": float(np.diff(np.log(errors))[-1] / np.diff(np.log(config.taus))[-1]),
            "errors": errors,
            "energy_monotone": all(monotone),
            "seconds": seconds,
        }
    fw.save(out, config, arrays, results, started)


def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    config, arrays, results = fw.load(out)
    taus = np.array(config["taus"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, g in enumerate(config["geometries"]):
        axes[0].loglog(taus, arrays[f"{g}__errors"], "o-", color=f"C{i}",
                       label=f"{g}: slope {results[g]['rate']:.2f}")  # fmt: skip
        tau = f"{taus.min():g}"
        energy = arrays[f"{g}__energy__{tau}"]
        explicit = arrays[f"{g}__explicit_energy"]
        offset = explicit[0]
        axes[1].plot(arrays[f"{g}__times__{tau}"], energy - offset, "o", ms=3, color=f"C{i}",
                     label=f"{g}: JKO τ = {tau}")  # fmt: skip
        axes[1].plot(arrays[f"{g}__explicit_times"], explicit - offset, "-", color=f"C{i}")
    ref = arrays[f"{config['geometries'][0]}__errors"][0] * taus / taus[0]
    axes[0].loglog(taus, ref, "k--", lw=0.8, label="order 1")
    axes[0].set_xlabel("τ")
    axes[0].set_ylabel("error at t₁ vs explicit flow")
    axes[0].legend(fontsize=8)
    axes[0].set_title("JKO → explicit flow as τ → 0")
    axes[1].set_xlabel("t")
    axes[1].set_ylabel("G(μ(t)) − G(μ₀)")
    axes[1].set_title("energy: JKO iterates (dots) vs explicit flow (lines)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return [fw.savefig(fig, out / "jko_convergence.png")]


def report(out: Path) -> fw.Report:
    config, _, results = fw.load(out)
    claims = []
    for g in config["geometries"]:
        r = results[g]
        claims.append(
            fw.Claim(
                f"{g}: the JKO sequence converges to the explicit flow at order 1 in τ "
                "(MATH.md §5)",
                f"slope {r['rate']:.2f} (last pair {r['last_slope']:.2f}); errors "
                + ", ".join(f"{e:.1e}" for e in r["errors"]),
                "agrees" if 0.85 <= r["rate"] <= 1.15 else "differs",
            )
        )
        claims.append(
            fw.Claim(
                f"{g}: the energy is non-increasing along JKO",
                "non-increasing at every τ" if r["energy_monotone"] else "increases somewhere",
                "agrees" if r["energy_monotone"] else "differs",
            )
        )
    rates = ", ".join(f"{g} {results[g]['rate']:.2f}" for g in config["geometries"])
    notes = list(results.get("failures", []))
    return fw.Report(
        f"order in τ: {rates} (expected 1); energy monotone: "
        f"{all(results[g]['energy_monotone'] for g in config['geometries'])}.",
        claims,
        [("jko_convergence.png", "JKO error vs τ and the energy along the iterates.")],
        notes=notes,
    )
