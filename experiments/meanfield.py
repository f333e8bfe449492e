"""Experiment 4: mean-field convergence — particles → Gaussian ODE as n → ∞ (log-log).

n tokens sampled from g₀ follow ẋ_i = Γ[μⁿ](x_i), an exact weak solution of the
Transformer PDE; as n → ∞ the cloud converges to the PDE's solution from g₀, which for
softmax, L2 and Sinkhorn is the Gaussian of the moment ODE (MATH.md §3). The error of the
cloud's moments at t₁ against the ODE, (|Δα|² + ‖ΔΣ‖_F²)^{1/2}, averaged over seeds,
should fall at the Monte-Carlo rate n^{-1/2} (:func:`tpde.flows.compare`). Setting: the
mean-field check of MATH.md §4 item 8 (A, V, α₀, Σ₀, t₁ = 1).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.fields import registry
from tpde.flows import compare
from tpde.flows.compare import fit_rate
from tpde.measures import Gaussian

from . import framework as fw
from .common.variants import make_field

NAME = "meanfield"
ORDER = 4  # place in ``tpde run`` and in the report
TITLE = "mean-field convergence: particle error vs n"
#: The variants run: registered names (tpde.fields.registry checks them) with a Gaussian
#: solution to compare the particles with.
MEANFIELD_VARIANTS = tuple(registry.variant(name).name for name in ("softmax", "l2", "sinkhorn"))
A = ((-0.5, 0.3), (-0.2, -0.4))
V = ((1.0, 0.2), (-0.1, 0.8))
MEAN = (0.5, -0.3)
COV = ((1.0, 0.3), (0.3, 0.5))


@dataclass(frozen=True)
class Config:
    variants: tuple[str, ...] = MEANFIELD_VARIANTS
    sizes: tuple[int, ...] = (125, 250, 500, 1000, 2000, 4000)
    sinkhorn_max_n: int = 1000  # Sinkhorn particles cost O(n²) per scaling iteration
    seeds: int = 16
    t1: float = 1.0
    particle_steps: int = 8

    def check(self) -> None:
        fw.check_choices("variants", self.variants, MEANFIELD_VARIANTS)
        if len(self.sizes) < 2 or min(self.sizes) < 2 or self.seeds < 1 or self.t1 <= 0:
            raise ValueError("sizes needs two values >= 2, seeds >= 1 and t1 > 0.")
        if len(set(self.sizes)) < 2:
            raise ValueError(
                f"sizes needs two different values: the rate is the slope of log error against "
                f"log n; received {self.sizes}."
            )
        if self.particle_steps < 1:
            raise ValueError("particle_steps must be >= 1.")
        if "sinkhorn" in self.variants and sum(n <= self.sinkhorn_max_n for n in self.sizes) < 2:
            raise ValueError(
                "sinkhorn_max_n must admit at least two of the sizes (the rate in n needs two); "
                f"sizes {self.sizes}."
            )

    def memory_bytes(self) -> int:
        """float64 scores of the largest cloud (n², in chunks of ~2²³ beyond the dense limit;
        ~6 at once: RK4 stages), and the saved clouds of every size and seed (n × 2, twice)."""
        n = max(self.sizes)
        saved = self.seeds * sum(self.sizes) * 2 * 2
        return 8 * (6 * min(n * n, 2**23) + saved)


QUICK = {"sizes": "100,200,400,800", "seeds": "12", "sinkhorn_max_n": "800"}


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    g0 = Gaussian(torch.tensor(MEAN, dtype=torch.float64), torch.tensor(COV, dtype=torch.float64))
    arrays, results = {}, {}
    for variant in fw.progress(config.variants, "meanfield"):
        sizes = [n for n in config.sizes if variant != "sinkhorn" or n <= config.sinkhorn_max_n]
        clock = time.perf_counter()
        comp = compare(
            make_field(variant, A, V),
            g0,
            config.t1,
            n=sizes,
            seeds=config.seeds,
            save=2,
            particle_steps=config.particle_steps,
            w2_max_points=1,  # particle-particle W2 is not this study's question: skipped
        )
        errors = np.array(
            [
                [
                    float(comp.moment_error[f"particles n={n} seed={s}"][-1])
                    for s in range(config.seeds)
                ]
                for n in sizes
            ]
        )
        arrays[f"{variant}__sizes"] = np.array(sizes)
        arrays[f"{variant}__errors"] = errors
        results[variant] = {
            "rate": fit_rate(sizes, np.sqrt((errors**2).mean(1))),
            "rate_compare": comp.rate_n,
            "status": sorted(set(comp.status.values())),
            "seconds": time.perf_counter() - clock,
            "reference_cov": comp.runs["gaussian"].final.cov().tolist(),
        }
    fw.save(out, config, arrays, results, started)


def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    config, arrays, results = fw.load(out)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for i, v in enumerate(config["variants"]):
        n, err = arrays[f"{v}__sizes"], arrays[f"{v}__errors"]
        rms = np.sqrt((err**2).mean(1))
        ax.scatter(np.repeat(n, err.shape[1]), err.ravel(), s=3, color=f"C{i}", alpha=0.3)
        ax.plot(n, rms, "o-", color=f"C{i}",
                    label=f"{v}: slope {results[v]['rate']:.2f}")  # fmt: skip
    n_all = np.array(sorted({int(n) for v in config["variants"] for n in arrays[f"{v}__sizes"]}))
    first = arrays[f"{config['variants'][0]}__errors"]
    ref = np.sqrt((first**2).mean(1))[0] * np.sqrt(n_all[0] / n_all)
    ax.plot(n_all, ref, "k--", lw=0.8, label="n^{-1/2}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("particles n")
    ax.set_ylabel("moment error at t₁ vs Gaussian ODE")
    ax.set_title(f"mean-field limit: RMS over {config['seeds']} seeds (dots: each seed)")
    ax.legend()
    return [fw.savefig(fig, out / "meanfield_rates.png")]


def report(out: Path) -> fw.Report:
    config, _, results = fw.load(out)
    claims = []
    for v in config["variants"]:
        rate = results[v]["rate"]
        sizes = [n for n in config["sizes"] if v != "sinkhorn" or n <= config["sinkhorn_max_n"]]
        claims.append(
            fw.Claim(
                f"{v}: particles converge to the mean-field (Gaussian) solution at the "
                "Monte-Carlo rate n^{-1/2}",
                f"fitted slope of the RMS error {rate:.2f} over n = {sizes[0]}…{sizes[-1]}"
                f" ({results[v]['seconds']:.0f} s)",
                "agrees" if -0.75 <= rate <= -0.3 else "differs",
            )
        )
    rates = ", ".join(f"{v} {results[v]['rate']:.2f}" for v in config["variants"])
    summary = f"error vs n slopes {rates} (expected −0.5)."
    return fw.Report(summary, claims, [("meanfield_rates.png", "Error vs n, log-log.")])
