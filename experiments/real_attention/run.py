"""The computations of the ``real-attention`` study (package notes): ``run(config, out)`` writes
the raw data."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from tpde.flows import BlowUp, integrate
from tpde.measures import Empirical, Gaussian
from tpde.metrics.diagnostics import distance_to_gaussian

from .. import framework as fw
from ..common import real_normalised as nm
from ..common.real_normalised import nanmedian
from .config import F64, LAYERS, ROUTES, Config


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

    ``schedules``: route -> schedule of the normalised models (``common.real_normalised``).
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
