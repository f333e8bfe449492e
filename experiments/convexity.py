"""Experiment 6: the non-convexity probe — the softmax energy for V = I, A = −I.

MATH.md §5: softmax attention is the (twisted) gradient flow of E(μ) = ½∬e^{yᵀAx}dμdμ; for
V = I, A = −I the PDE descends G = E, and E is *not* geodesically convex, so the JKO
theory's contraction (λ-convexity, λ ≥ 0) is not available. The probe
(:func:`tpde.fields.convexity_probe`) takes d²/dt² G(γ(t)) / W2(γ(0), γ(1))² by double
backward along random W2 geodesics leaving a particle cloud and a Gaussian; a negative
value is a direction of non-convexity. Controls: a convex potential ∫½|x|² (λ = 1 exactly)
on the same measures. A translation of a centred cloud is shown explicitly: G along it is
concave near the start (the Gaussian kernel e^{−x·y} of nearby points).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.fields import PotentialEnergy, Softmax, convexity_probe
from tpde.fields.gradient_flow.energies import as_energy
from tpde.measures import Empirical, Gaussian

from . import framework as fw

NAME = "convexity"
ORDER = 6  # place in ``tpde run`` and in the report
TITLE = "non-convexity probe of the softmax energy (V = I, A = −I)"
F64 = torch.float64


@dataclass(frozen=True)
class Config:
    n: int = 128  # particles of the probed cloud
    cloud_scale: float = 0.5  # the cloud is cloud_scale · N(0, I)
    gaussian_var: float = 0.3  # the probed Gaussian is N(0, gaussian_var · I)
    geodesics: int = 64
    radius: float = 0.5
    shift: float = 3.0  # length of the explicit translation
    seed: int = 0

    def check(self) -> None:
        if self.n < 2 or self.geodesics < 1 or not 0 < self.radius < 1:
            raise ValueError("n >= 2, geodesics >= 1 and 0 < radius < 1 are required.")
        if self.cloud_scale <= 0 or self.gaussian_var <= 0 or self.shift <= 0:
            raise ValueError("cloud_scale, gaussian_var and shift must be > 0.")

    def memory_bytes(self) -> int:
        """float64 n × n pairwise matrices of the probed cloud, with autograd's second
        derivatives (~8 copies) per geodesic (geodesics probed one at a time)."""
        return 8 * 8 * self.n**2


QUICK = {"n": "48", "geodesics": "16"}


def field() -> Softmax:
    eye = torch.eye(2, dtype=F64)
    return Softmax.from_interaction(-eye, eye)


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    gen = fw.torch_generator(config.seed)
    cloud = Empirical(config.cloud_scale * torch.randn(config.n, 2, generator=gen, dtype=F64))
    gauss = Gaussian(torch.zeros(2, dtype=F64), config.gaussian_var * torch.eye(2, dtype=F64))
    control = PotentialEnergy.quadratic(torch.eye(2, dtype=F64))
    softmax = field()  # the probed energy E (V = I, A = −I), built once
    arrays, results = {}, {}
    for label, mu in (("particles", cloud), ("gaussian", gauss)):
        for energy_name, energy in (("softmax", softmax), ("control", control)):
            probe = convexity_probe(
                energy,
                mu,
                n_geodesics=config.geodesics,
                radius=config.radius,
                generator=gen,
            )
            key = f"{label}__{energy_name}"
            arrays[key] = probe.second_derivatives.detach().numpy()
            results[key] = {
                "n_negative": int(probe.n_negative),
                "pairs": int(probe.second_derivatives.numel()),
                "min_value": float(probe.min_value),
                "convex": bool(probe.convex),
            }
    # An explicit non-convex direction: translate the centred cloud by s·e₁.
    G = as_energy(softmax)
    centred = Empirical(cloud.points - cloud.points.mean(0))
    s = np.linspace(-config.shift, config.shift, 121)
    direction = torch.tensor([1.0, 0.0], dtype=F64)
    values = [float(G(Empirical(centred.points + float(v) * direction), "dense")) for v in s]
    arrays["translation_s"], arrays["translation_G"] = s, np.array(values)
    second = np.gradient(np.gradient(values, s), s)
    results["translation_second_derivative_at_0"] = float(second[len(s) // 2])
    fw.save(out, config, arrays, results, started)


def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    _, arrays, results = fw.load(out)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    keys = ["particles__softmax", "gaussian__softmax", "particles__control", "gaussian__control"]
    data = [arrays[k].ravel() for k in keys]
    axes[0].boxplot(data)
    axes[0].set_xticks(range(1, len(keys) + 1), [k.replace("__", "\n") for k in keys])
    axes[0].axhline(0, color="k", lw=0.8)
    axes[0].set_yscale("symlog", linthresh=1e-2)
    axes[0].set_ylabel("d²G/dt² / W2² along random geodesics")
    axes[0].set_title("convexity constants: softmax E (V = I, A = −I) vs ½|x|² control")
    axes[1].plot(arrays["translation_s"], arrays["translation_G"])
    axes[1].set_xlabel("translation s of the centred cloud along e₁")
    axes[1].set_ylabel("G = E")
    axes[1].set_title(
        f"G along a translation: G'' at 0 = {results['translation_second_derivative_at_0']:.3g}"
    )
    fig.tight_layout()
    return [fw.savefig(fig, out / "convexity_probe.png")]


def report(out: Path) -> fw.Report:
    _, _, results = fw.load(out)
    claims = []
    for label in ("particles", "gaussian"):
        r = results[f"{label}__softmax"]
        claims.append(
            fw.Claim(
                f"E is not geodesically convex for V = I, A = −I (MATH.md §5) — {label}",
                f"{r['n_negative']}/{r['pairs']} negative second derivatives, min "
                f"{r['min_value']:.3g}",
                "agrees" if r["n_negative"] > 0 else "differs",
            )
        )
        c = results[f"{label}__control"]
        claims.append(
            fw.Claim(
                f"control ∫½|x|² is 1-convex — {label}",
                f"{c['n_negative']} negative, min {c['min_value']:.6f}",
                "agrees" if c["convex"] and abs(c["min_value"] - 1) < 1e-6 else "differs",
            )
        )
    second = results["translation_second_derivative_at_0"]
    claims.append(
        fw.Claim(
            "a translation of a centred cloud is a W2 geodesic along which E is concave",
            f"d²G/ds² at s = 0: {second:.3g}",
            "agrees" if second < 0 else "differs",
        )
    )
    neg = sum(results[f"{m}__softmax"]["n_negative"] for m in ("particles", "gaussian"))
    return fw.Report(
        f"{neg} negative second derivatives of E found (controls: none); translation "
        f"curvature {second:.3g}.",
        claims,
        [("convexity_probe.png", "Convexity constants along geodesics; G along a translation.")],
    )
