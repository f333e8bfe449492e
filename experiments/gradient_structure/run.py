"""The computations of the ``gradient-structure`` study (package notes): ``run(config, out)``
writes the raw data."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tpde.fields import GroupedQueryAttention, dynamic_gap
from tpde.measures import Empirical

from .. import framework as fw
from .config import MODELS, Config
from .control import family_arrays

#: Per-head weight scores saved as (S, H) tables.
HEAD_SCORES = ("symmetry", "definite_residual")
#: The columns of the metrics table (:class:`tpde.pretrained.LayerMetrics`).
METRICS = ("w2", "sinkhorn", "bures", "twisted", "twisted_rank", "off_range")


def load_model(name: str):
    """One model in float32 through :func:`tpde.pretrained.load`, or the reason it is
    missing (an ImportError's message: its wheel or extra is not installed)."""
    from tpde import pretrained

    loaders = {
        "minilm": lambda: pretrained.load(pretrained.minilm_path()),
        "smollm2": lambda: pretrained.load_smollm2(torch.float32),
        "gemma3": pretrained.load_gemma3_270m,
    }
    try:
        return loaders[name](), None
    except ImportError as err:
        return None, str(err)


def layer_indices(model, config: Config) -> list[int]:
    """Every layer ("all"), the first and the last ("ends") or the first ("first")."""
    last = len(model.layers) - 1
    return {"all": list(range(last + 1)), "ends": [0, last], "first": [0]}[config.layers]


#: The JKO solves' relative tolerance and iteration cap (distances are compared to ~1e-3).
JKO_TOL, JKO_ITER = 1e-4, 30


def sentence_rows(model, mu: Empirical, layers: list[int], taus: list[float], cache: dict):
    """Dynamic gaps, energies, JKO steps and metrics of one sentence (package notes 2–5),
    and the JKO failures."""
    from tpde.pretrained import depth_energies, layer_metrics, layer_steps, model_structure

    structure = model_structure(model, mu, layers=layers, cache=cache)
    energies = depth_energies(model, mu, layers=layers, cache=cache)  # scaled past float64
    steps = layer_steps(model, mu, taus, layers=layers, tol=JKO_TOL, max_iter=JKO_ITER,
                        cache=cache)  # fmt: skip
    best = {s: steps.best(s) for s in ("jko", "explicit")}
    metrics = layer_metrics(model, mu, layers=layers, cache=cache)
    return {
        "dynamic_gap": structure.table("dynamic_gap").numpy(),
        "layer_gap": structure.layer_scores("dynamic_gap").numpy(),
        **_energy_columns(energies),
        "jko_w2": steps.jko_w2,
        "explicit_w2": steps.explicit_w2,
        "jko_frozen": steps.jko_frozen,
        "explicit_frozen": steps.explicit_frozen,
        "network_w2": steps.network_w2,
        "network_frozen": steps.network_frozen,
        "frozen_log_scale": steps.log_scale,
        "network_off_range": steps.off_range,
        "jko_converged": steps.converged,
        "best_tau_jko": best["jko"][0],
        "best_tau_explicit": best["explicit"][0],
        "metrics": np.stack([getattr(metrics, c) for c in METRICS], axis=-1).astype(float),
    }, list(steps.messages)


def _energy_columns(energies) -> dict:
    """The energy change relative to 𝓔 at the input, the structured rate on the same scale,
    their sign agreement and the common factor's log (0 unless 𝓔 passes float64's range)."""
    before = energies.before.abs()
    return {"energy_change": energies.relative_change.numpy(),
            "energy_rate": (energies.structured_rate / before).numpy(),
            "energy_agrees": energies.agrees.numpy().astype(float),
            "energy_log_scale": energies.log_scale.numpy()}  # fmt: skip


def control_row(mu: Empirical, heads: int, head_size: int, seed: int) -> dict:
    """The control: random heads (Gaussian weights of variance 1/fan-in, no GQA, no mask)
    with a real layer's shapes, on the model's depth-0 tokens scaled to unit RMS per token
    (what an RMS norm without gain reads): weight scores and dynamic gaps per head."""
    d = mu.dim
    g = fw.torch_generator(seed)

    def draw(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=g, dtype=torch.float64) / math.sqrt(cols)

    width = heads * head_size
    field = GroupedQueryAttention(draw(width, d), draw(width, d), draw(width, d),
                                  draw(d, width), heads, heads, causal=False)  # fmt: skip
    x = mu.points.detach().double()
    cloud = Empirical(x / x.square().mean(-1, keepdim=True).sqrt())
    gap = dynamic_gap(field, cloud)
    return {
        "control_symmetry": gap.report.scores("symmetry").numpy(),
        "control_definite_residual": gap.report.scores("definite_residual").numpy(),
        "control_dynamic_gap": gap.head_gaps.detach().numpy(),
        "control_layer_symmetry": np.array([gap.report.symmetry]),
    }


def model_arrays(name: str, model, config: Config) -> tuple[dict, list[str]]:
    """Every question for one model: arrays keyed ``{name}_…`` and the JKO failures."""
    from tpde.pretrained import corpus, model_structure

    layers = layer_indices(model, config)
    mus = [_cut(model.embed(s)[0], config.tokens) for s in corpus()[: config.sentences]]  # float64
    cache: dict = {}  # the projections, computed once per sublayer
    weights = model_structure(model, layers=layers, cache=cache)
    rows, messages = [], []
    for mu in fw.progress(mus, f"gradient-structure {name}"):
        row, failed = sentence_rows(model, mu, layers, config.tau_values(), cache)
        rows.append(row)
        messages += failed
    arrays = {key: np.stack([row[key] for row in rows]) for key in rows[0]}
    for score in HEAD_SCORES:
        arrays[score] = weights.table(score).numpy()
    for score in ("symmetry", "directionality"):
        arrays[f"layer_{score}"] = weights.layer_scores(score).numpy()
    near = weights.reports[0]
    head_size = int(cache[(0, 0)][0].heads[0].Wq.shape[0])
    arrays.update(control_row(mus[0], len(near.heads), head_size, config.seed))
    arrays["layers"] = np.array(layers)
    return {f"{name}_{k}": np.asarray(v, dtype=float) for k, v in arrays.items()}, messages


def _cut(mu: Empirical, n: int) -> Empirical:
    """The first n tokens in float64 (positions kept; uniform weights again): a structured
    energy Σ_ij e^{score} overflows float32 on real decoders' clouds."""
    m = min(n, len(mu.points))
    positions = None if mu.positions is None else mu.positions[:m]
    return Empirical(mu.points[:m].double(), positions=positions)


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    arrays, results = {}, {"missing": {}, "jko_failures": {}, "models": []}
    for name in MODELS:
        print(f"gradient-structure: {name} ({time.perf_counter() - started:.0f} s)",
              file=sys.stderr)  # fmt: skip
        model, why = load_model(name)
        if model is None:
            results["missing"][name] = why
            continue
        more, failures = model_arrays(name, model, config)
        arrays.update(more)
        results["models"].append(name)
        results["jko_failures"][name] = failures
        del model
    print(f"gradient-structure: random families ({time.perf_counter() - started:.0f} s)",
          file=sys.stderr)  # fmt: skip
    more, results["families"] = family_arrays(config)
    arrays.update(more)
    results["taus"] = config.tau_values()
    fw.save(out, config, arrays, results, started)
