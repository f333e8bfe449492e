"""The theory study's figures, from the saved data only."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tpde.theory import SCHEMES_WITH_LAW

from .. import framework as fw
from ..common.kernels import time_scale
from .config import LAW_TOL


def plot(out: Path) -> list[Path]:
    config, arrays, results = fw.load(out)
    return plot_all(fw.pyplot(), Path(out), config, arrays, results)


def plot_all(plt, out, config, arrays, results) -> list:
    return [_plot_equiangular(plt, out, config, arrays, results),
            _plot_instability(plt, out, config, arrays),
            _plot_instability_s2(plt, out, config, arrays, results),
            _plot_causal(plt, out, config, arrays),
            _plot_hardmax(plt, out, config, arrays),
            _plot_sync(plt, out, config, arrays)]  # fmt: skip


def _plot_equiangular(plt, out, config, arrays, results):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    times, n = arrays["eq_times"], config["eq_ns"][len(config["eq_ns"]) // 2]
    kernel = config["kernels"][0]
    for i, scheme in enumerate(SCHEMES_WITH_LAW):
        tag = f"eq__{kernel}__{scheme}__{n}"
        axes[0].plot(times, arrays[f"{tag}__law"], color=f"C{i}", label=scheme)
        axes[0].plot(times, arrays[f"{tag}__rho"], "o", color=f"C{i}", ms=4)
    axes[0].set(xlabel="t", ylabel="ρ", title=f"{kernel.upper()}, n = {n}, β = "
                f"{config['eq_beta']:g}")  # fmt: skip
    axes[0].legend(fontsize=8)
    laws = {k: v for k, v in results["equiangular"].items()
            if isinstance(v, dict) and "rho_error" in v}  # fmt: skip
    labels = list(laws)
    axes[1].semilogy(range(len(labels)), [max(laws[k]["rho_error"], 1e-17) for k in labels], "o")
    axes[1].axhline(LAW_TOL, color="k", ls="--", lw=0.8, label="1e-8")
    axes[1].set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
    axes[1].set(ylabel="max |ρ − law|", title="every run")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fw.savefig(fig, out / "theory_equiangular.png")


def _plot_instability(plt, out, config, arrays):
    kernel = config["inst_kernels"][0]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, beta in enumerate(config["inst_betas"]):
        tag = f"inst__{kernel}__{beta:g}"
        pred, meas, se = (arrays[f"{tag}__{k}"] for k in ("predicted", "measured", "se"))
        k = np.arange(1, len(pred) + 1)
        axes[0].plot(k, pred, "-", color=f"C{i}", label=f"β = {beta:g}: λ_k")
        axes[0].errorbar(k, meas, yerr=se, fmt="o", color=f"C{i}", ms=4, capsize=2)
    axes[0].set(xlabel="mode k", ylabel="growth rate", title=f"{kernel.upper()}: particles "
                "(dots ± jackknife s.e.) on λ_k (lines)")  # fmt: skip
    axes[0].legend(fontsize=8)
    betas = arrays[f"lat__{kernel}__betas"]
    axes[1].step(
        betas, arrays[f"lat__{kernel}__dominant_theory"], where="mid", label="argmax k²I_k(β)"
    )
    axes[1].plot(betas, arrays[f"lat__{kernel}__dominant"], "o", label="measured (lattice)")
    axes[1].set(xlabel="β", ylabel="dominant mode k*", title="fastest-growing mode")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fw.savefig(fig, out / "theory_instability.png")


def _plot_instability_s2(plt, out, config, arrays, results):
    kernels = config["inst_kernels"]
    fig, axes = plt.subplots(1, len(kernels) + 1, figsize=(5.5 * (len(kernels) + 1), 4.2))
    for ax, kernel in zip(axes, kernels, strict=False):
        for i, beta in enumerate(config["inst_betas"]):
            tag = f"s2__{kernel}__{beta:g}"
            pred, meas, se = (arrays[f"{tag}__{k}"] for k in ("predicted", "measured", "se"))
            k = np.arange(1, len(pred) + 1)
            lat = arrays.get(f"s2lat__{kernel}__measured")
            law = pred if lat is None else arrays[f"s2lat__{kernel}__predicted"][i]
            ax.plot(np.arange(1, len(law) + 1), law, "-", color=f"C{i}", label=f"β = {beta:g}: λ_k")
            ax.errorbar(k, meas, yerr=se, fmt="o", color=f"C{i}", ms=4, capsize=2)
            if lat is not None:
                ax.plot(np.arange(1, lat.shape[1] + 1), lat[i], "x", color=f"C{i}", ms=6)
        ax.set(xlabel="degree k", ylabel="growth rate (rates ≤ 0 not shown)", yscale="log",
               title=f"{kernel.upper()} on S²: random (o), lattice (x), law (lines)")  # fmt: skip
        ax.legend(fontsize=8)
    kernel, beta = kernels[0], config["inst_betas"][len(config["inst_betas"]) // 2]
    tag = f"s2__{kernel}__{beta:g}"
    times, power, pred = (arrays[f"{tag}__{k}"] for k in ("times", "power", "predicted"))
    scale = time_scale(kernel, beta)  # USA runs in rescaled time
    for k in range(power.shape[1]):
        axes[-1].semilogy(times, power[:, k] / power[0, k], "o", color=f"C{k}", ms=3,
                          label=f"k = {k + 1}")  # fmt: skip
        axes[-1].semilogy(times, np.exp(2 * pred[k] * scale * times), "-", color=f"C{k}", lw=0.8)
    window = results["instability_s2"][f"random/{kernel}/{beta:g}"]["window"]
    axes[-1].axvline(window, color="k", ls="--", lw=0.8, label="end of the fit window")
    axes[-1].set(xlabel="t (USA: t·e^β)" if kernel == "usa" else "t", ylabel="E_k(t)/E_k(0)",
                 title=f"{kernel.upper()}, β = {beta:g}: mean of seeds, e^(2λt)")  # fmt: skip
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    return fw.savefig(fig, out / "theory_instability_s2.png")


def _plot_causal(plt, out, config, arrays):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, d in enumerate(config["causal_dims"]):
        spread = np.maximum(arrays[f"causal__{d}__spread"], 1e-17)
        moved = np.maximum(arrays[f"causal__{d}__moved"], 1e-17)
        axes[0].semilogy(np.full(len(spread), i) - 0.1, spread, "o", color="C0", ms=3,
                         label="final max distance to token 1" if i == 0 else None)  # fmt: skip
        axes[0].semilogy(np.full(len(moved), i) + 0.1, moved, "s", color="C1", ms=3,
                         label="displacement of token 1" if i == 0 else None)  # fmt: skip
    axes[0].axhline(1e-6, color="C0", ls="--", lw=0.8)
    axes[0].axhline(1e-12, color="C1", ls="--", lw=0.8)
    axes[0].set_xticks(
        range(len(config["causal_dims"])), [f"d = {d}" for d in config["causal_dims"]]
    )
    axes[0].set(title="causal clustering, one dot per seed")
    axes[0].legend(fontsize=8)
    times, counts = arrays["renyi__times"], arrays["renyi__counts"]
    se = counts.std(1, ddof=1) / math.sqrt(counts.shape[1]) if counts.shape[1] > 1 else 0 * times
    axes[1].errorbar(times, counts.mean(1), yerr=se, fmt="o-", label="clusters (mean ± s.e.)")
    axes[1].axhline(arrays["renyi__centres"].mean(), color="C1", ls="--", label="Rényi centres")
    axes[1].axhline(
        arrays["renyi__strong"].mean(), color="C2", ls=":", label="strong Rényi centres"
    )
    axes[1].set_xlim(left=0)
    axes[1].set(xscale="symlog", yscale="log", xlabel="t", title=f"β = {config['renyi_beta']:g}, "
                f"n = {config['renyi_tokens']}, d = 2")  # fmt: skip
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fw.savefig(fig, out / "theory_causal.png")


def _plot_hardmax(plt, out, config, arrays):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    betas, shares, deviation = (arrays[k] for k in ("hard__betas", "hard__share_softmax",
                                                    "hard__deviation"))  # fmt: skip
    S = shares.shape[1]
    axes[0].errorbar(betas, shares.mean(1), yerr=shares.std(1, ddof=1) / math.sqrt(S)
                     if S > 1 else None, fmt="o-", label="softmax βA")  # fmt: skip
    axes[0].axhline(arrays["hard__share_hardmax"].mean(), color="k", ls="--", label="hardmax")
    axes[0].set(xscale="log", xlabel="β", ylabel="share at the Voronoi vertex")
    axes[0].legend(fontsize=8)
    axes[1].errorbar(betas, deviation.mean(1), yerr=deviation.std(1, ddof=1) / math.sqrt(S)
                     if S > 1 else None, fmt="o-")  # fmt: skip
    axes[1].set(xscale="log", yscale="log", xlabel="β", ylabel="mean |x_β − x_hardmax|",
                title=f"t = {config['hard_t1']:g}")  # fmt: skip
    fig.tight_layout()
    return fw.savefig(fig, out / "theory_hardmax.png")


def _plot_sync(plt, out, config, arrays):
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    betas, S = arrays["sync__betas"], config["sync_seeds"]
    for i, n in enumerate(arrays["sync__ns"]):
        share = arrays["sync__synced"][i] / S
        ax.errorbar(betas, share, yerr=np.sqrt(share * (1 - share) / S), fmt="o-", label=f"n = {n}")
    ax.axvspan(min(betas.min(), 1.0) * 0.9, 1.0, color="0.9", label="theorem: β ≤ 1")
    ax.set(xscale="log", xlabel="β", ylabel="share synchronised", ylim=(-0.05, 1.05))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fw.savefig(fig, out / "theory_sync.png")
