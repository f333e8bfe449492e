"""The computations of the ``real-decoder`` study (package notes): ``run(config, out)`` writes
the raw data."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from tpde.flows import integrate
from tpde.measures import Empirical
from tpde.metrics.clustering import angular_cluster_count

from .. import framework as fw
from ..common import real_normalised as nm
from .config import F64, MINILM_ROUTES, SCHEDULE_KINDS, Config


# ---------------------------------------------------------------------- the models
def variant_schedule(model, kind: str):
    """The network's weights with parts removed (question 2; module notes)."""
    from tpde.fields import GroupedQueryAttention, LayerSchedule, Normalized

    layers = []
    for layer in model.layers:
        attention, gamma = layer.attention, layer.attention_norm.gamma
        if kind == "attn+norm":
            layers.append(Normalized(attention, layer.attention_norm))
        elif kind == "attn":
            layers.append(attention)
        elif kind == "attn+mlp":
            layers.append(attention + layer.mlp)
        else:  # sphere: Γ^R(y) = Γ(Ry)/R, queries and keys scaled by R, values as they are
            R = float(gamma.norm())
            Wq, Wk, Wv, Wo, *_ = attention.params.at(0.0, gamma)
            scaled = GroupedQueryAttention(
                R * Wq, R * Wk, Wv, Wo, attention.heads, attention.kv_heads,
                scale=attention.scale, position=attention.position, causal=True,
            )  # fmt: skip
            layers.append(Normalized(scaled, "post-ln", tangent=False))
    return LayerSchedule(layers)


def run_variant(schedule, mu: Empirical, kind: str) -> torch.Tensor:
    """Tokens at depths 0 … L of a variant, each layer one Euler step of size 1."""
    start = mu.with_points(nm.on_unit_sphere(mu.points)) if kind == "sphere" else mu
    method = "lie-trotter" if kind in ("attn+mlp",) else "euler"
    L = len(schedule)
    flow = integrate(schedule, start, float(L), dt=1.0, method=method, save=L + 1, events=())
    states = torch.full((L + 1, *mu.points.shape), float("nan"), dtype=mu.points.dtype)
    for l, m in enumerate(flow.measures):  # a flow that overflows stops early: NaN after
        states[l] = m.points
    return states


# ---------------------------------------------------------------------- measurements
def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def cross_entropy(logits: torch.Tensor, ids: torch.Tensor) -> float:
    """Mean −log p(next token) over positions 0 … n − 2 (nats)."""
    logp = torch.log_softmax(logits[:-1].double(), -1)
    return float(-logp.gather(-1, ids[1:, None].to(logp.device)).mean())


def rms_w2(x: torch.Tensor, y: torch.Tensor) -> float:
    """W2 between two clouds divided by the RMS norm of y's tokens."""
    from tpde.metrics import w2

    return float(w2(Empirical(x), Empirical(y))) / float(y.pow(2).sum(-1).mean().sqrt())


def first_token_cosine(points: torch.Tensor) -> np.ndarray:
    """mean_{j ≥ 1} cos(x_0, x_j), per depth: points (L + 1, n, d) → (L + 1,)."""
    unit = nm.on_unit_sphere(points)
    return (unit[:, 1:] * unit[:, :1]).sum(-1).mean(-1).cpu().numpy()


def consensus_gap(points: torch.Tensor) -> float:
    """1 − mean_{j ≥ 1} |cos(x_0, x_j)| (Rodríguez Abella et al.): 0 at consensus."""
    unit = nm.on_unit_sphere(points)
    return float(1 - (unit[1:] @ unit[0]).abs().mean())


def flow_question(model, sentence: str, net: torch.Tensor, config: Config) -> dict:
    """Question 1 for one sentence (float64): the flow and the splittings against ``net``."""
    mu = model.embed(sentence)[0]
    ids = model.token_ids(sentence)
    routes = {"flow": model.hidden_states(mu, method="dopri5", rtol=config.flow_rtol,
                                          atol=config.flow_rtol)}  # fmt: skip
    for k in config.splits:
        routes[f"h1/{k}"] = model.hidden_states(mu, dt=1.0 / k)
    net_logits = model.logits(net[-1])  # (n, vocabulary): computed once
    top_net = net_logits.argmax(-1)
    row = {"ce_network": cross_entropy(net_logits, ids)}
    for name, states in routes.items():
        logits = model.logits(states[-1])
        row[f"dist_{name}"] = [relative(states[l], net[l]) for l in range(len(net))]
        row[f"w2sphere_{name}"] = nm.sphere_w2(states[-1], net[-1])
        row[f"w2rms_{name}"] = rms_w2(states[-1], net[-1])
        row[f"top1_{name}"] = float((logits.argmax(-1) == top_net).double().mean())
        row[f"ce_{name}"] = cross_entropy(logits, ids)
    flow = routes["flow"]
    row["toflow_network"] = relative(net[-1], flow[-1])
    for k in config.splits:  # the splittings' own convergence to the flow (order 1)
        row[f"toflow_h1/{k}"] = relative(routes[f"h1/{k}"][-1], flow[-1])
    row["first_cos_flow"] = first_token_cosine(flow)
    row["first_cos_network_flow"] = first_token_cosine(net)  # the same sentences
    return row


def sink_question(model, net: torch.Tensor) -> dict:
    """Question 3 for one sentence: attention on the first token, drift toward it."""
    weights = torch.stack([model.attention_weights(net[l], l) for l in range(len(model.layers))])
    return {
        "sink": weights[..., 1:, 0].mean(-1).cpu().numpy(),  # (L, H)
        "first_cos_network": first_token_cosine(net),
        "norm_first": net[:, 0].norm(dim=-1).cpu().numpy() / float(net[0, 0].norm()),
        "norm_rest": net[:, 1:].norm(dim=-1).mean(-1).cpu().numpy()
        / float(net[0, 1:].norm(dim=-1).mean()),
    }


def parts_question(model, net: torch.Tensor, sentence: str, schedules: dict, delta: float):
    """Question 2 for one sentence: every variant's clouds against the network's."""
    mu = model.embed(sentence)[0]
    clouds = {"network": net}
    for kind, schedule in schedules.items():
        clouds[kind] = run_variant(schedule, mu, kind)
    row = {}
    for route, states in clouds.items():
        finite = [bool(torch.isfinite(x).all()) for x in states]
        row[f"finite_{route}"] = sum(finite) - 1  # the last depth with finite tokens
        for q, measure in (
            ("shape", lambda x: nm.cloud_shape(x / x.norm(dim=-1).max())),  # scale-free
            ("cos", lambda x: float(np.mean(nm.cosines(x)))),
            ("clusters", lambda x: float(angular_cluster_count(Empirical(x), delta))),
        ):
            values = [measure(x) if ok else np.nan for x, ok in zip(states, finite, strict=True)]
            if q == "shape":
                values = [v if ok else (np.nan, np.nan) for v, ok in zip(values, finite,
                                                                         strict=True)]  # fmt: skip
                row[f"erank_{route}"], row[f"aniso_{route}"] = map(list, zip(*values, strict=True))
            else:
                row[f"{q}_{route}"] = values
        row[f"w2_{route}"] = [
            nm.sphere_w2(x, y) if ok else np.nan
            for x, y, ok in zip(states, net, finite, strict=True)
        ]
    return row


def minilm_question(sentences: list[str]) -> dict:
    """Question 2 for MiniLM: its real clouds against its layers with parts removed.

    "whole": attention and MLP, both LayerNorms (``MiniLM.layer_schedule()``, Lie–Trotter
    h = 1: the network itself); "attn+ln": MLP = 0, both LayerNorms kept; "attn": attention
    alone, x ← x + Attn(x); "attn+mlp": attention and MLP without LayerNorms.
    """
    from tpde.fields import LayerSchedule
    from tpde.pretrained import embed, hidden_states, load_minilm

    model = load_minilm(F64)
    mlps = model.mlp_fields()
    schedules = {
        "whole": (model.layer_schedule(), "lie-trotter"),
        "attn+ln": (model.layer_schedule(mlp=False), "euler"),
        "attn": (model.schedule, "euler"),
        "attn+mlp": (LayerSchedule([a + m for a, m in zip(model.fields, mlps, strict=True)]),
                     "lie-trotter"),
    }  # fmt: skip
    rows = []
    for mu, real in zip(embed(sentences, F64), hidden_states(sentences, F64), strict=True):
        row = {}
        for route, (schedule, method) in schedules.items():
            flow = integrate(schedule, mu, 6.0, dt=1.0, method=method, save=7, events=())
            states = torch.stack([m.points for m in flow.measures])
            pairs = list(zip(states, real, strict=True))
            row[f"minilm_w2_{route}"] = [nm.sphere_w2(x, y) for x, y in pairs]
            row[f"minilm_dist_{route}"] = [relative(x, y) for x, y in pairs]
            row[f"minilm_erank_{route}"] = [nm.cloud_shape(x)[0] for x in states]
            row[f"minilm_cos_{route}"] = [float(np.mean(nm.cosines(x))) for x in states]
        row["minilm_erank_real"] = [nm.cloud_shape(x)[0] for x in real]
        row["minilm_cos_real"] = [float(np.mean(nm.cosines(x))) for x in real]
        rows.append(row)
    return {k: np.array([row[k] for row in rows], dtype=float) for k in rows[0]}


def loop_question(model, sentence: str, passes: int) -> dict:
    """Question 4: the consensus gap after every pass through the stack, with/without MLP."""
    mu = model.embed(sentence)[0]
    L = float(len(model.layers))
    no_mlp = variant_schedule(model, "attn+norm")
    out = {}
    for name, schedule, method in (("mlp", model.schedule, "lie-trotter"),
                                   ("nomlp", no_mlp, "euler")):  # fmt: skip
        tokens, gaps, norms = mu, [consensus_gap(mu.points)], [float(mu.points.norm(dim=-1).mean())]
        for _ in fw.progress(range(passes), f"real-decoder loop ({name})"):
            tokens = integrate(schedule, tokens, L, dt=1.0, method=method, save=2, events=()).final
            gaps.append(consensus_gap(tokens.points))
            norms.append(float(tokens.points.norm(dim=-1).mean()))
        out[f"loop_gap_{name}"], out[f"loop_norm_{name}"] = gaps, norms
    return out


# ---------------------------------------------------------------------- the run
def run(config: Config, out: Path) -> None:
    from tpde.pretrained import corpus, load_smollm2

    started = time.perf_counter()
    model64, model32 = load_smollm2(F64), load_smollm2(torch.float32)
    sentences = corpus()[: config.sentences]
    schedules = {kind: variant_schedule(model64, kind) for kind in SCHEDULE_KINDS}
    rows, flows = [], []
    for i, sentence in enumerate(fw.progress(sentences, "real-decoder")):
        net = model64.hidden_states(model64.embed(sentence)[0])
        row = sink_question(model64, net)
        row.update(parts_question(model64, net, sentence, schedules, config.cluster_delta))
        rows.append(row)
        if i < config.flow_sentences:
            flows.append(flow_question(model64, sentence, net, config))
    arrays = {k: np.array([row[k] for row in rows], dtype=float) for k in rows[0]}
    arrays.update({k: np.array([row[k] for row in flows], dtype=float) for k in flows[0]})
    loops = [loop_question(model32, s, config.loop_passes)
             for s in corpus()[: config.loop_sentences]]  # fmt: skip
    arrays.update({k: np.array([r[k] for r in loops]) for k in loops[0]})
    arrays.update(minilm_question(sentences))
    arrays["lengths"] = np.array([len(model64.token_ids(s)) for s in sentences])
    arrays["splits"] = np.array(config.splits)
    fw.save(out, config, arrays, summarise(arrays, config), started)


def _median(x, axis=0):
    return nm.nanmedian(np.asarray(x, dtype=float), axis=axis)


def summarise(arrays: dict, config: Config) -> dict:
    """Medians over sentences that the report quotes."""
    routes = ["flow", *(f"h1/{k}" for k in config.splits)]
    r = {"ce_network": float(np.mean(arrays["ce_network"]))}
    for name in routes:
        r[name] = {
            "dist_final": float(np.median(arrays[f"dist_{name}"][:, -1])),
            "dist_max": float(np.max(arrays[f"dist_{name}"])),
            "w2sphere": float(np.median(arrays[f"w2sphere_{name}"])),
            "w2rms": float(np.median(arrays[f"w2rms_{name}"])),
            "top1": float(np.mean(arrays[f"top1_{name}"])),
            "ce": float(np.mean(arrays[f"ce_{name}"])),
        }
    r["toflow"] = {
        name: float(np.median(arrays[f"toflow_{name}"]))
        for name in ("network", *(f"h1/{k}" for k in config.splits))
    }
    sink = arrays["sink"]  # (sentences, L, H)
    by_layer = _median(sink).mean(-1)
    r["sink_by_layer"] = by_layer.tolist()
    r["sink_mean"] = float(sink.mean())
    r["sink_heads_over_half"] = float((_median(sink) > 0.5).mean())
    r["first_cos_network"] = _median(arrays["first_cos_network"]).tolist()
    r["first_cos_flow"] = _median(arrays["first_cos_flow"]).tolist()
    r["first_cos_network_flow"] = _median(arrays["first_cos_network_flow"]).tolist()
    r["norm_first"] = _median(arrays["norm_first"]).tolist()
    r["norm_rest"] = _median(arrays["norm_rest"]).tolist()
    for route in ("network", *SCHEDULE_KINDS):
        for q in ("w2", "erank", "aniso", "cos", "clusters"):
            r[f"{q}_{route}"] = _median(arrays[f"{q}_{route}"]).tolist()
        w2_by_depth = _median(arrays[f"w2_{route}"])[1:]
        finite = w2_by_depth[np.isfinite(w2_by_depth)]
        r[f"track_{route}"] = float(finite.mean()) if finite.size else None
        r[f"finite_{route}"] = int(np.min(arrays[f"finite_{route}"]))
    for route in MINILM_ROUTES:
        r[f"minilm_{route}"] = {
            "w2": float(np.mean(_median(arrays[f"minilm_w2_{route}"])[1:])),
            "dist_final": float(np.median(arrays[f"minilm_dist_{route}"][:, -1])),
            "erank_final": float(np.median(arrays[f"minilm_erank_{route}"][:, -1])),
            "cos_final": float(np.median(arrays[f"minilm_cos_{route}"][:, -1])),
        }
    r["minilm_real"] = {
        "erank_final": float(np.median(arrays["minilm_erank_real"][:, -1])),
        "cos_final": float(np.median(arrays["minilm_cos_real"][:, -1])),
    }
    for name in ("mlp", "nomlp"):
        gap = arrays[f"loop_gap_{name}"]
        norms = arrays[f"loop_norm_{name}"]
        r[f"loop_{name}"] = {
            "start": float(gap[:, 0].mean()),
            "one_pass": float(gap[:, 1].mean()),
            "end": float(gap[:, -1].mean()),
            "min": float(gap.min()),
            "norm_growth": float(np.mean(norms[:, -1] / norms[:, 0])),
        }
    return r
