"""The computations of the ``real-models`` study (package notes): ``run(config, out)`` writes
the raw data."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from tpde.flows import integrate
from tpde.measures import Empirical

from .. import framework as fw
from ..common import real_normalised as nm
from ..common.schemes import scheme_field
from . import ideal, placement
from .config import MODELS, Config


def load_models() -> dict:
    """The three models in float32, each through :func:`tpde.pretrained.load`."""
    from tpde.pretrained import load, load_gemma3_270m, load_smollm2, minilm_path

    return {"minilm": load(minilm_path()), "smollm2": load_smollm2(torch.float32),
            "gemma3": load_gemma3_270m()}  # fmt: skip


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def consensus_gap(points: torch.Tensor) -> float:
    """1 − mean_{j ≥ 1} |cos(x_0, x_j)|: 0 at consensus (Rodríguez Abella et al.)."""
    unit = nm.on_unit_sphere(points)
    return float(1 - (unit[1:] @ unit[0]).abs().mean())


def split_row(split: torch.Tensor, net: torch.Tensor) -> dict:
    """The per-sublayer split of each layer (L, 2, n, d) against its input tokens x_l: the
    token-mean |v_attn| and |v_mlp| over the token-mean |x_l|, and the token-mean cosine
    between v_attn and v_mlp (L,) each."""
    sizes = split.norm(dim=-1).mean(-1)  # (L, 2): token-mean update norms per sublayer
    norms = net[:-1].norm(dim=-1).mean(-1)  # (L,)
    cos = torch.nn.functional.cosine_similarity(split[:, 0], split[:, 1], dim=-1)
    return {
        "share_attn": (sizes[:, 0] / sizes.sum(-1)).numpy(),
        "attn_rel": (sizes[:, 0] / norms).numpy(),
        "mlp_rel": (sizes[:, 1] / norms).numpy(),
        "split_cos": cos.mean(-1).numpy(),
    }


def effective_directions(states: torch.Tensor) -> np.ndarray:
    """n²/Σ_{ij} cos²(x_i, x_j) per layer of ``states`` (L + 1, n, d) → (L + 1,): the
    participation ratio (tr G)²/tr G² of the cosine Gram matrix G (G_ii = 1). k mutually
    orthogonal groups of equal size, each of one direction, give k; antipodal tokens count
    as one direction."""
    unit = nm.on_unit_sphere(states.double())
    gram = unit @ unit.mT
    n = states.shape[-2]
    return (n**2 / (gram**2).sum((-2, -1))).numpy()


def layer_row(model, mu: Empirical) -> dict:
    """Questions 1–4 for one sentence: per-layer split, norms, cosines, clusters, sink, and
    the network's placement curves (:func:`placement.row`, keys ``real_…``)."""
    net = model.hidden_states(mu)  # (L + 1, n, d)
    split = model.split(mu)  # (L, 2, n, d)
    layers = len(model.layers)
    sink = [model.attention_weights(net[l], l)[..., 1:, 0].mean() for l in range(layers)]
    real = placement.row(net, "real")  # radius and mean cosine per layer, among others
    return {
        **split_row(split, net),
        **real,
        "norm": real["real_radius"] / real["real_radius"][0],
        "update": np.array([_relative(net[l + 1], net[l]) for l in range(layers)]),
        "cos": real["real_cos"],
        "directions": effective_directions(net),
        "sink": torch.stack(sink).numpy(),
        "split_error": float(
            (split.sum(1) - (net[1:] - net[:-1])).norm() / (net[1:] - net[:-1]).norm()
        ),
    }, net


def flow_row(model, mu: Empirical, net: torch.Tensor, step: float) -> dict:
    """Question 5: the distance by depth of the flow (Lie–Trotter at ``step``) to the network."""
    flow = model.hidden_states(mu, dt=step)
    top = model.logits(net[-1]).argmax(-1) if model.head is not None else None
    row = {"dist_flow": np.array([_relative(flow[l], net[l]) for l in range(len(net))])}
    if top is not None:
        row["top1_flow"] = float((model.logits(flow[-1]).argmax(-1) == top).double().mean())
    return row


def loop_row(model, net: torch.Tensor, passes: int) -> dict:
    """Question 6: the middle layer looped ``passes`` times from its own input tokens."""
    l = len(model.layers) // 2
    field = model.layers[l].field
    mu = Empirical(net[l], positions=torch.arange(net.shape[1]))
    trajectory = integrate(field, mu, float(passes), dt=1.0, method="lie-trotter",
                           save=passes + 1, events=())  # fmt: skip
    points = [m.points for m in trajectory.measures]
    return {
        "loop_gap": np.array([consensus_gap(x) for x in points]),
        "loop_cos": np.array([float(np.mean(nm.cosines(x))) for x in points]),
        "loop_norm": np.array(
            [float(x.norm(dim=-1).mean() / net[l].norm(dim=-1).mean()) for x in points]
        ),
    }


def calibrated_field(name: str, model, tokens: list[torch.Tensor]) -> tuple:
    """The idealised model of ``name`` (:mod:`.ideal`) with β calibrated on ``tokens``: the
    field and (β, the network's median first-layer entropy, the idealised one at t = 0)."""
    target = float(np.median(ideal.network_entropies(model, tokens)))
    beta = ideal.calibrate_beta(target, tokens)
    reached = float(np.median(ideal.ideal_entropies(beta, ideal.ideal_scores(tokens))))
    field = scheme_field(ideal.SCHEME[name], beta, tokens[0].shape[-1], float(len(model.layers)))
    return field, np.array([beta, target, reached])


def model_rows(name: str, model, sentences: list[str], config: Config) -> tuple[dict, list]:
    """Every question for one model: its arrays (keys ``{name}_…``) and the statuses of its
    idealised runs."""
    mus = [model.embed(s)[0] for s in sentences]
    layers, rows, statuses = len(model.layers), [], []
    with torch.no_grad():
        field, calibration = calibrated_field(name, model, [mu.points for mu in mus])
        for i, mu in enumerate(fw.progress(mus, f"real-models {name}")):
            row, net = layer_row(model, mu)
            states, status = ideal.ideal_states(field, mu.points, layers, config.ideal_step)
            row.update(placement.row(states, "ideal"))
            statuses.append(status)
            if i < config.flow_sentences:
                row.update(flow_row(model, mu, net, config.flow_step))
            if i == 0:
                row.update(loop_row(model, net, config.loop_passes))
            rows.append(row)
    arrays = {}
    for key in rows[0]:
        values = [row[key] for row in rows if key in row]
        arrays[f"{name}_{key}"] = np.array(values, dtype=float)
    arrays[f"{name}_lengths"] = np.array([len(mu.points) for mu in mus])
    arrays[f"{name}_beta"] = calibration
    return arrays, statuses


def run(config: Config, out: Path) -> None:
    from tpde.pretrained import corpus

    started = time.perf_counter()
    models = load_models()
    sentences = corpus()[: config.sentences]
    arrays, statuses = {}, {}
    for name in MODELS:
        more, statuses[name] = model_rows(name, models[name], sentences, config)
        arrays.update(more)
    results = summarise(arrays)
    for name in MODELS:
        results[name]["ideal_status"] = sorted(set(statuses[name]))
    fw.save(out, config, arrays, results, started)


def summarise(arrays: dict) -> dict:
    """Medians over sentences that the report quotes, per model."""
    r = {}
    for name in MODELS:
        a = {k[len(name) + 1 :]: v for k, v in arrays.items() if k.startswith(name + "_")}
        median = {k: np.median(a[k], axis=0) for k in ("share_attn", "norm", "update", "cos",
                                                      "directions", "sink", "attn_rel",
                                                      "mlp_rel", "split_cos")}  # fmt: skip
        r[name] = {
            **{f"{k}_by_layer": v.tolist() for k, v in median.items()},
            "share_attn_mean": float(median["share_attn"].mean()),
            "norm_growth": float(median["norm"][-1]),
            "update_mean": float(median["update"].mean()),
            "cos_first": float(median["cos"][0]),
            "cos_last": float(median["cos"][-1]),
            "directions_last": float(median["directions"][-1]),
            "sink_mean": float(median["sink"].mean()),
            "sink_max": float(median["sink"].max()),
            "split_error_max": float(a["split_error"].max()),
            "flow_final": float(np.median(a["dist_flow"][:, -1])),
            "flow_max": float(np.max(a["dist_flow"])),
            "top1_flow": float(np.mean(a["top1_flow"])) if "top1_flow" in a else None,
            "loop_gap_start": float(a["loop_gap"][0, 0]),
            "loop_gap_end": float(a["loop_gap"][0, -1]),
            "loop_cos_end": float(a["loop_cos"][0, -1]),
            "loop_norm_end": float(a["loop_norm"][0, -1]),
            "split_cos_mean": float(median["split_cos"].mean()),
            "beta": float(a["beta"][0]),
            "entropy_network": float(a["beta"][1]),
            "entropy_ideal": float(a["beta"][2]),
            "ideal": placement.medians(a, "ideal"),
            "real": placement.medians(a, "real"),
        }
    return r
