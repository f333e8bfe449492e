"""Experiment 7: real attention — how Gaussian are real token clouds, and does the picture hold?

The token clouds of all-MiniLM-L6-v2 (one empirical measure per sentence of the bundled
corpus, d = 384) are followed through the 6 real layers three ways:

- **real**: the model's own hidden states (attention, residuals, LayerNorm, MLP);
- **pde**: the attention-only Transformer PDE with the real time-dependent parameters
  (``load_minilm().schedule``: layer l on depth-time [l, l + 1)) moving the sentence's
  tokens, from the embedding output;
- **ode**: its Gaussian moment ODE (MATH.md §3, with biases) from the moment-matched Gaussian
  N(m, Σ) of the same tokens, integrated by Dormand–Prince with blow-up detection.

Measured per depth (and per layer × head where a head is involved):

- Gaussianity: W2 between a cloud and its moment-matched Gaussian
  (:func:`tpde.metrics.diagnostics.distance_to_gaussian`), divided by the same statistic on
  n points drawn from a Gaussian with the same moments (median over ``floor_draws``). A
  ratio ≈ 1 is "as Gaussian as an n-point Gaussian sample can look"; it is computed in the
  cloud's own span (rank ≤ n − 1, where both measures live; W2 is isometry-invariant) and,
  per head, in the head's key space {K_h y} (the softmax tilt e^{qᵀK_h y} acts on the key
  distribution: that is what the Gaussian closure needs to be Gaussian).
- Attention temperature: the effective number of attended tokens of head h, ESS =
  1/Σ_j w_ij² averaged over queries i, as a fraction of n. The Gaussian closure averages the
  tilt e^{qᵀK y} over a whole Gaussian; a finite cloud's softmax is the self-normalised
  importance-sampling estimate of that average, accurate only while the ESS is large.
- Effective rank and anisotropy λ_max / tr Σ of the covariance (real, pde, ode).
- Closure error: ‖Σ_ode − Σ_pde‖_F / ‖Σ_pde‖_F and |m_ode − m_pde| / √tr Σ_pde along
  depth, until the ODE's blow-up.

Part 2 (``tpde.experiments._real_normalised``): the real clouds against the attention-only
PDE, attention with the model's own attention-output LayerNorm (BERT's Post-LN sublayer, no
MLP), attention with both of a layer's LayerNorms (BERT with its MLPs set to zero) and the
post-LN sphere model with the same weights — W2 between the clouds mapped to the unit
sphere, cosine similarities, effective rank and anisotropy by depth: which model tracks the
real clouds, and by how much.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.flows import BlowUp, integrate
from tpde.measures import Empirical, Gaussian
from tpde.metrics.diagnostics import distance_to_gaussian

from . import _framework as fw
from . import _real_normalised as nm
from ._real_normalised import fmt, nanmedian

NAME = "real-attention"
TITLE = "Experiment 7 — real attention: all-MiniLM-L6-v2 token clouds vs the Gaussian picture"
F64 = torch.float64
LAYERS = 6
ROUTES = ("real", "pde")


@dataclass(frozen=True)
class Config:
    sentences: int = 48  # the first sentences of the bundled corpus
    particle_dt: float = 0.05  # RK4 step of the attention-only PDE (20 steps per layer)
    ode_rtol: float = 1e-4  # Dormand–Prince tolerance of the moment ODE (blow-up time to 1e-6)
    blowup_trace: float = 1e4  # the ODE stops when tr Σ passes this (tr Σ₀ ≈ 85)
    closure_saves: int = 21  # per layer, for the closure error along depth
    gaussian_samples: int = 256  # Gaussian sample against which a cloud's W2 is taken
    floor_draws: int = 4  # Gaussian clouds of the same n for the ratio's denominator
    sample_sizes: tuple[int, ...] = (250, 1000)  # Gaussian-sampled clouds of sentence 0
    sample_t1: float = 0.5  # … followed over [0, sample_t1] of layer 0
    sphere_scale: float = 1.0  # sphere model: R_l = sphere_scale · |γ|₂ of layer l's input LN
    sphere_dt: float = 0.1  # its RK4 step: tokens within 3.3e-4 of dt = 0.025 (sentence 0)
    seed: int = 0

    def check(self) -> None:
        if not 1 <= self.sentences <= 238:
            raise ValueError(f"sentences must be in 1 … 238 (the corpus); got {self.sentences}.")
        if self.particle_dt <= 0 or self.particle_dt > 1 or self.ode_rtol <= 0:
            raise ValueError("particle_dt must be in (0, 1] and ode_rtol > 0.")
        if self.blowup_trace <= 0 or self.closure_saves < 2:
            raise ValueError("blowup_trace must be > 0 and closure_saves >= 2.")
        if self.gaussian_samples < 2 or self.floor_draws < 1:
            raise ValueError("gaussian_samples must be >= 2 and floor_draws >= 1.")
        if any(n < 2 for n in self.sample_sizes) or not 0 < self.sample_t1 <= 1:
            raise ValueError("sample_sizes must be >= 2 and sample_t1 in (0, 1].")
        if not 0 < self.sphere_scale < float("inf") or not 0 < self.sphere_dt <= 1:
            raise ValueError("sphere_scale must be finite and > 0, sphere_dt in (0, 1].")

    def memory_bytes(self) -> int:
        """float64 clouds of the largest sample (n² scores, ~6 at once) and the saved token
        states of every sentence (≤ 128 tokens × 384 coordinates × closure_saves × 6)."""
        n = max(self.sample_sizes)
        saved = self.sentences * 128 * 384 * self.closure_saves * 6
        return 8 * (6 * n * n + saved)


QUICK = {
    "sentences": "12",
    "closure_saves": "11",
    "gaussian_samples": "128",
    "floor_draws": "3",
    "sample_sizes": "100,400",
}


# ---------------------------------------------------------------------- measurements
def gaussianity_ratio(points: torch.Tensor, config: Config, gen: torch.Generator) -> float:
    """W2(cloud, its Gaussian) / median W2(n-point Gaussian cloud, its Gaussian)."""
    coords = nm.span_coordinates(points)
    seed = int(torch.randint(2**31 - 1, (1,), generator=gen))
    value = distance_to_gaussian(Empirical(coords), n_samples=config.gaussian_samples, seed=seed)
    gauss = Gaussian(torch.zeros(coords.shape[1], dtype=F64), Empirical(coords).cov())
    floors = []
    for _ in range(config.floor_draws):
        draw = Empirical(gauss.sample(coords.shape[0], generator=gen))
        seed = int(torch.randint(2**31 - 1, (1,), generator=gen))
        floors.append(
            float(distance_to_gaussian(draw, n_samples=config.gaussian_samples, seed=seed))
        )
    return float(value) / float(np.median(floors))


def head_statistics(field, layer: int, points: torch.Tensor, config: Config, gen) -> np.ndarray:
    """(2, heads): key-space Gaussianity ratio and ESS fraction of every head of ``field``."""
    mu = Empirical(points)
    out = np.empty((2, len(field.heads)))
    for h, head in enumerate(field.heads):
        out[0, h] = gaussianity_ratio(head.softmax_form(float(layer), mu, points).keys, config,
                                      gen)  # fmt: skip
    out[1] = nm.ess_fraction(field, layer, points)
    return out


# ---------------------------------------------------------------------- the run
def _closure_times(config: Config) -> torch.Tensor:
    per_layer = torch.linspace(0, 1, config.closure_saves, dtype=F64)[:-1]
    return torch.cat([per_layer + l for l in range(LAYERS)] + [torch.tensor([6.0], dtype=F64)])


def _integer_indices(times: torch.Tensor) -> list[int]:
    return [int(torch.argmin((times - l).abs())) for l in range(LAYERS + 1)]


def one_sentence(
    model,
    tokens: Empirical,
    states: torch.Tensor,
    config: Config,
    gen,
    times: torch.Tensor,
    schedules: dict,
) -> dict:
    """Every measurement of one sentence (arrays keyed as in :func:`run`) at save ``times``.

    ``schedules``: route -> schedule of the normalised models (``_real_normalised``).
    """
    at_layers = _integer_indices(times)
    pde = integrate(model.schedule, tokens, 6.0, dt=config.particle_dt, method="rk4",
                    save=times, events=())  # fmt: skip
    gauss = Gaussian(tokens.mean(), tokens.cov())
    ode = integrate(
        model.schedule, gauss, 6.0, method="dopri5", rtol=config.ode_rtol, atol=1e-6,
        save=times, events=(BlowUp(config.blowup_trace, size="trace"),),
    )  # fmt: skip
    event = float(ode.event_time) if ode.status == "blow_up" else np.inf
    clouds = {"real": list(states), "pde": [pde.measures[i].points for i in at_layers]}
    row = {"ode_event_time": event, "ode_status": ode.status, "pde_status": pde.status}
    for route, layers in clouds.items():
        row[f"gauss_{route}"] = [gaussianity_ratio(x, config, gen) for x in layers]
        shapes = [nm.cloud_shape(x) for x in layers]
        row[f"erank_{route}"], row[f"aniso_{route}"] = map(list, zip(*shapes, strict=True))
        # The input of layer l is the cloud at depth l: (2, layers, heads).
        row[f"heads_{route}"] = np.stack(
            [head_statistics(model.fields[l], l, layers[l], config, gen) for l in range(LAYERS)],
            axis=1,
        )
    cov_err, mean_err = [], []
    for i, t in enumerate(times.tolist()):
        if i >= len(ode.measures) or t > event or not torch.isfinite(ode.measures[i].cov()).all():
            cov_err.append(np.nan)
            mean_err.append(np.nan)
            continue
        cloud, g = pde.measures[i], ode.measures[i]
        c_pde = cloud.cov()
        cov_err.append(float((g.cov() - c_pde).norm() / c_pde.norm()))
        mean_err.append(float((g.mean() - cloud.mean()).norm() / c_pde.trace().sqrt()))
    ode_shapes = [
        nm.covariance_shape(ode.measures[i].cov())
        if i < len(ode.measures) and times[i] <= event
        else (np.nan, np.nan)
        for i in at_layers
    ]
    row["erank_ode"], row["aniso_ode"] = map(list, zip(*ode_shapes, strict=True))
    row["closure_cov"], row["closure_mean"] = cov_err, mean_err
    more, statuses = nm.normalised_flows(schedules, tokens, config.sphere_dt)
    sphere = [layer.field for layer in schedules["sphere"].layers]  # the rescaled fields
    fields = {"postln": model.fields, "postln2": model.fields, "sphere": sphere}
    row["normalised"] = nm.compare({**clouds, **more}, fields)
    row.update({f"{route}_status": status for route, status in statuses.items()})
    return row


def sampled_clouds(model, tokens: Empirical, config: Config, gen) -> dict:
    """tr Σ(t) on [0, sample_t1]: the moment ODE vs clouds sampled from the same Gaussian.

    The n-sample flows are the mean-field approximations of the ODE: they converge to it as
    n → ∞, at a speed set by the importance-sampling ESS of the softmax tilt.
    """
    times = torch.linspace(0, config.sample_t1, 11, dtype=F64)
    gauss = Gaussian(tokens.mean(), tokens.cov())
    ode = integrate(
        model.schedule, gauss, config.sample_t1, method="dopri5", rtol=config.ode_rtol,
        atol=1e-6, save=times, events=(BlowUp(config.blowup_trace, size="trace"),),
    )  # fmt: skip
    trace = np.full((1 + len(config.sample_sizes), len(times)), np.nan)
    trace[0, : len(ode.measures)] = [float(g.cov().trace()) for g in ode.measures]
    for i, n in enumerate(config.sample_sizes):
        cloud = Empirical(gauss.sample(n, generator=gen))
        tilt = logit_spread(model.fields[0], cloud)
        flow = integrate(model.schedule, cloud, config.sample_t1, dt=config.particle_dt / 2,
                         method="rk4", save=times, events=())  # fmt: skip
        trace[1 + i] = [float(m.cov().trace()) for m in flow.measures]
    return {
        "sample_times": times.numpy(),
        "sample_trace": trace,
        "sample_sizes": np.array(config.sample_sizes),
        "sample_logit_sd": tilt[0],  # layer 0's heads on the largest sampled cloud
        "sample_ess": tilt[1],
    }


def logit_spread(field, cloud: Empirical) -> np.ndarray:
    """(2, heads): s.d. of the logits over keys (mean over queries), and the ESS (count).

    On a Gaussian, head h's tilt has logit variance s² = qᵀKΣKᵀq; the self-normalised
    softmax over n samples has an effective sample size ≈ n·e^{−s²}, so the particle flow
    reaches the moment ODE only for n ≫ e^{s²}.
    """
    out = np.empty((2, len(field.heads)))
    for h, head in enumerate(field.heads):
        form = head.softmax_form(0.0, cloud, cloud.points)
        logits = form.queries @ form.keys.transpose(-1, -2) + form.key_bias
        out[0, h] = float(logits.std(-1).mean())
        out[1, h] = float((1 / (torch.softmax(logits, -1) ** 2).sum(-1)).mean())
    return out


def run(config: Config, out: Path) -> None:
    from tpde.pretrained import corpus, embed, hidden_states, load_minilm

    started = time.perf_counter()
    gen = fw.torch_generator(config.seed)
    model = load_minilm(F64)
    sentences = corpus()[: config.sentences]
    tokens, states = embed(sentences, F64), hidden_states(sentences, F64)
    times = _closure_times(config)  # the same save times for every sentence
    radii = [config.sphere_scale * norm.radius for norm in model.input_norms]
    schedules = {
        "postln": model.post_ln_schedule(),
        "postln2": model.post_ln_schedule(output_norm=True),
        "sphere": model.sphere_schedule(radii),
    }
    rows = [
        one_sentence(model, mu, h, config, gen, times, schedules)
        for mu, h in fw.progress(zip(tokens, states, strict=True), "real-attention", len(tokens))
    ]
    keys = [k for k in rows[0] if not k.endswith("_status") and k != "normalised"]
    arrays = {k: np.array([row[k] for row in rows], dtype=float) for k in keys}
    arrays.update(nm.stack_rows([row["normalised"] for row in rows]))
    arrays["sphere_radii"] = np.array(radii)
    arrays["lengths"] = np.array([mu.n for mu in tokens])
    arrays["closure_times"] = times.numpy()
    arrays.update(sampled_clouds(model, tokens[0], config, gen))
    results = {
        **{f"{r}_status": [row[f"{r}_status"] for row in rows] for r in ("ode", *nm.MODELS)},
        **summarise(arrays),
    }
    fw.save(out, config, arrays, results, started)


def summarise(arrays: dict) -> dict:
    """Medians over sentences that the report quotes."""
    times, event = arrays["closure_times"], arrays["ode_event_time"]
    first = [int(np.argmin(np.abs(times - t))) for t in (0.1, 0.2, 0.3)]
    trace = arrays["sample_trace"]
    last = int(np.flatnonzero(np.isfinite(trace[0]))[-1])
    worst = int(np.argmax(arrays["sample_logit_sd"]))
    return {
        "sample_check": {
            "worst_head": worst,
            "worst_logit_sd": float(arrays["sample_logit_sd"][worst]),
            "worst_ess": float(arrays["sample_ess"][worst]),
            "median_logit_sd": float(np.median(arrays["sample_logit_sd"])),
            "t": float(arrays["sample_times"][last]),
            "ode_trace": [float(trace[0, 0]), float(trace[0, last])],
            "cloud_traces": {
                str(n): [float(trace[1 + i, 0]), float(trace[1 + i, last])]
                for i, n in enumerate(arrays["sample_sizes"].tolist())
            },
        },
        "tokens_median": float(np.median(arrays["lengths"])),
        "ode_blowup_fraction": float(np.isfinite(event).mean()),
        "ode_blowup_time_median": float(nanmedian(np.where(np.isfinite(event), event, np.nan))),
        "ode_blowup_time_range": [float(np.nanmin(event)), float(np.nanmax(event))]
        if np.isfinite(event).any()
        else None,
        "closure_cov_at": {
            f"{times[i]:g}": float(nanmedian(arrays["closure_cov"][:, i])) for i in first
        },
        **{
            f"{q}_{route}": nanmedian(arrays[f"{q}_{route}"]).tolist()
            for q in ("gauss", "erank", "aniso")
            for route in ("real", "pde")
        },
        "erank_ode": nanmedian(arrays["erank_ode"]).tolist(),
        **{
            f"heads_{name}_{route}": nanmedian(arrays[f"heads_{route}"][:, i]).tolist()
            for i, name in enumerate(("gauss", "ess"))
            for route in ROUTES
        },
        **nm.summarise(arrays),
    }


# ---------------------------------------------------------------------- figures
def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    _, arrays, _ = fw.load(out)
    depth = np.arange(LAYERS + 1)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for route in ROUTES:
        nm.band(axes[0], depth, arrays[f"gauss_{route}"], nm.LABELS[route], nm.COLORS[route])
    axes[0].axhline(1, color="k", lw=0.8, ls="--")
    axes[0].set_ylabel("W2(cloud, its Gaussian) / same for a Gaussian cloud")
    axes[0].set_title("non-Gaussianity of the token cloud (1 = Gaussian)")
    nm.shape_panels(axes, depth, arrays, (*ROUTES, "ode"), nm.LABELS, nm.COLORS)
    fig.tight_layout()
    paths = [fw.savefig(fig, out / "real_attention_depth.png")]

    fig, axes = plt.subplots(2, 2, figsize=(13, 7))
    titles = ("key-space non-Gaussianity (median over sentences)", "attended tokens ESS / n")
    for row, route in enumerate(ROUTES):
        for col in range(2):
            ax, data = axes[row, col], nanmedian(arrays[f"heads_{route}"][:, col])
            image = ax.imshow(data, aspect="auto", cmap="viridis" if col else "magma")
            fig.colorbar(image, ax=ax)
            ax.set_title(f"{nm.LABELS[route]}: {titles[col]}", fontsize=10)
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_attention_heads.png"))

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.2))
    times = arrays["closure_times"]
    alive = np.isfinite(arrays["closure_cov"]).any(0) & (times > 0)  # both gaps are 0 at t = 0
    nm.band(
        axes[0], times[alive], arrays["closure_cov"][:, alive], "‖Σ_ode − Σ_pde‖ / ‖Σ_pde‖", "C3"
    )
    nm.band(
        axes[0], times[alive], arrays["closure_mean"][:, alive], "|m_ode − m_pde| / √tr Σ_pde", "C4"
    )
    axes[0].set_yscale("log")
    axes[0].set_xlabel("depth-time t")
    axes[0].set_title("Gaussian closure vs the particles (until the ODE blows up)")
    if alive.any():
        axes[0].legend(fontsize=8)
    else:
        axes[0].text(
            0.5, 0.5, "no save before the blow-up", ha="center", transform=axes[0].transAxes
        )
    event = arrays["ode_event_time"]
    finite = event[np.isfinite(event)]
    axes[1].hist(finite, bins=20, color="C2")
    axes[1].set_xlabel("blow-up time of the moment ODE (tr Σ > threshold)")
    axes[1].set_title(f"{len(finite)}/{len(event)} sentences: the ODE blows up")
    trace, sizes = arrays["sample_trace"], arrays["sample_sizes"]
    axes[2].semilogy(arrays["sample_times"], trace[0], "k-o", ms=3, label="moment ODE")
    for i, n in enumerate(sizes):
        axes[2].semilogy(arrays["sample_times"], trace[1 + i], "--", label=f"{n} particles")
    axes[2].set_xlabel("depth-time t (layer 0)")
    axes[2].set_ylabel("tr Σ")
    axes[2].set_title("sentence 0: ODE vs clouds sampled from its Gaussian")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_attention_closure.png"))
    return paths + nm.plot(plt, arrays, out)


# ---------------------------------------------------------------------- report
def report(out: Path) -> fw.Report:
    _, arrays, r = fw.load(out)
    n = len(arrays["lengths"])
    ess_real = np.array(r["heads_ess_real"], dtype=float)
    gauss_heads = np.array(r["heads_gauss_real"], dtype=float)
    blow = r["ode_blowup_fraction"]
    t_blow = r["ode_blowup_time_median"]
    closure = ", ".join(f"t = {t}: {v:.2g}" for t, v in r["closure_cov_at"].items() if v)
    check = r["sample_check"]
    clouds = "; ".join(
        f"{n} particles {a:.0f} → {b:.0f}" for n, (a, b) in check["cloud_traces"].items()
    )
    claims = [
        fw.Claim(
            "Mean field: particles sampled from a Gaussian follow its moment ODE as n grows "
            "(MATH.md §3) — at practical n, with the real weights",
            f"sentence 0, layer 0, t = 0 → {check['t']:.2g}: tr Σ of the ODE "
            f"{check['ode_trace'][0]:.0f} → {check['ode_trace'][1]:.0f}; {clouds}. Head "
            f"{check['worst_head']}'s logits have s.d. {check['worst_logit_sd']:.1f} on the "
            f"Gaussian (median head {check['median_logit_sd']:.1f}): ESS "
            f"{check['worst_ess']:.1f} of {list(check['cloud_traces'])[-1]} sampled points, "
            f"so n ≫ e^(s²) would be needed",
            "differs"
            if abs(check["ode_trace"][1] / list(check["cloud_traces"].values())[-1][1] - 1) > 0.1
            else "agrees",
        ),
        fw.Claim(
            "The Gaussian picture: a Gaussian token cloud stays Gaussian and its moments follow "
            "the moment ODE (MATH.md §3) — applied to real sentences",
            f"the moment ODE from each sentence's moment-matched Gaussian blows up in "
            f"{blow:.0%} of {n} sentences, median t = {t_blow:.3g} (inside layer 0); the "
            f"particle PDE stays finite through all 6 layers. Relative covariance gap ODE vs "
            f"particles: {closure}",
            "differs" if blow > 0.5 else "agrees",
        ),
        fw.Claim(
            "Real token clouds are Gaussian (the closure's premise)",
            f"non-Gaussianity ratio of the real clouds by depth: {fmt(r['gauss_real'])}; "
            f"per head in key space {np.nanmin(gauss_heads):.2f} … {np.nanmax(gauss_heads):.2f} "
            f"(1 = an n-point Gaussian sample; median {r['tokens_median']:.0f} tokens)",
            "partly",
        ),
        fw.Claim(
            "Attention contracts the cloud toward low rank (MATH.md §4; rank collapse)",
            f"effective rank real {fmt(r['erank_real'])}; attention-only PDE "
            f"{fmt(r['erank_pde'])}; anisotropy real {fmt(r['aniso_real'])}, PDE "
            f"{fmt(r['aniso_pde'])}",
            "agrees" if r["erank_pde"][-1] < r["erank_pde"][0] else "differs",
        ),
        *nm.claims(r, n),
    ]
    best = r["best_model"]
    closest = (
        f" Closest to the real clouds (W2 on the unit sphere, mean over depths 1–6): "
        f"{nm.SHORT[best]} {r[f'track_{best}']:.3f}, {r['best_margin']:.2f}× below the next "
        f"model (tokens left at depth 0: {r['track_still']:.3f})."
    )
    summary = (
        f"{n} sentences × 6 real layers: the Gaussian moment ODE blows up in {blow:.0%} "
        f"(median t = {t_blow:.3g}); attended-token ESS/n per layer "
        f"{fmt(np.nanmedian(ess_real, axis=1))}; effective rank real "
        f"{r['erank_real'][0]:.1f} → {r['erank_real'][-1]:.1f}, PDE {r['erank_pde'][-1]:.1f}."
        if t_blow is not None
        else f"{n} sentences: the Gaussian moment ODE stays finite on all 6 layers."
    ) + closest
    notes = [
        "Why the closure breaks: on a Gaussian, the softmax tilt e^{qᵀK y} of head h moves the "
        "mean to α + ΣAᵀx, and the covariance obeys a Riccati equation that blows up in finite "
        "time when the logit spread qᵀKΣKᵀq is large (MATH.md §4 item 2). A finite cloud's "
        "softmax is the self-normalised importance-sampling estimate of that tilt: the real "
        "heads attend to few tokens (ESS/n above), so the cloud never sees the tails that make "
        "the Gaussian explode. The particle PDE therefore tracks the cloud, not the Gaussian.",
        "Gaussianity is judged against n-point Gaussian samples with the same moments (ratio "
        "1); with n ≈ 15 tokens in a span of dimension n − 1 the test has little power, so "
        "ratios of 1.1–1.3 say only that the clouds are not grossly non-Gaussian.",
        "The real model renormalises every layer (LayerNorm) and adds an MLP: its clouds keep "
        "their scale, while the attention-only PDE grows tr Σ; effective rank and anisotropy "
        "are scale-free and comparable. What the LayerNorms do without the MLP is "
        "measured by the two attention + LayerNorm models above.",
        *nm.notes(r),
    ]
    figures = [
        ("real_attention_depth.png", "Non-Gaussianity, effective rank and anisotropy by depth."),
        ("real_attention_heads.png", "Per layer and head: key-space non-Gaussianity and ESS/n."),
        ("real_attention_closure.png", "Moment ODE vs particles; blow-up times of the ODE."),
        (
            "real_attention_normalised.png",
            "The real clouds against the attention-only PDE, attention + the model's "
            "LayerNorm(s) and the sphere model: W2 on the unit sphere, effective rank, "
            "anisotropy.",
        ),
        ("real_attention_cosines.png", "Pairwise cosine similarities by depth, every model."),
    ]
    return fw.Report(summary, claims, figures, notes=notes)
