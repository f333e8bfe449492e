"""The ``real-models`` study's claims, tables and summary, from the saved data only."""

from __future__ import annotations

from pathlib import Path

from .. import framework as fw
from .config import MODELS, PLACEMENT


def _table(r: dict) -> str:
    rows = []
    for name in MODELS:
        m = r[name]
        top1 = "—" if m["top1_flow"] is None else f"{m['top1_flow']:.0%}"
        rows.append([
            f"{name} ({PLACEMENT[name]})", f"{m['share_attn_mean']:.2f}",
            f"×{m['norm_growth']:.3g}",
            f"{m['update_mean']:.3g}", f"{m['cos_first']:.2f} → {m['cos_last']:.2f}",
            f"{m['clusters_last']:.0f}", f"{m['sink_mean']:.2f} (max {m['sink_max']:.2f})",
            f"{m['flow_final']:.2g}", top1,
            f"{m['loop_gap_start']:.3f} → {m['loop_gap_end']:.3g}", f"{m['split_error_max']:.1e}",
        ])  # fmt: skip
    header = ["model", "attention share", "norm growth", "mean update", "mean cos (0 → L)",
              "clusters (L)", "first-token attention", "flow distance (L)", "flow top-1",
              "looped layer: gap", "split error"]  # fmt: skip
    return fw.markdown_table(header, rows)


def report(out: Path) -> fw.Report:
    config, arrays, r = fw.load(out)
    n = len(arrays["minilm_lengths"])
    growth = {name: r[name]["norm_growth"] for name in MODELS}
    update = {name: r[name]["update_mean"] for name in MODELS}
    norms = fw.Claim(
        "Norm placement regulates token norms (Karagodin et al.): Post-LN keeps them fixed, "
        "Pre-LN lets them grow, Peri-LN grows them but bounds each update by its output norm",
        ", ".join(
            f"{m} ({PLACEMENT[m]}): norms ×{growth[m]:.3g} over the stack, mean relative "
            f"update {update[m]:.3g}"
            for m in MODELS
        ),
        "agrees"
        if growth["minilm"] < 2 < growth["smollm2"] and update["gemma3"] < 0.5 * update["smollm2"]
        else "partly",
    )
    flow = fw.Claim(
        "A trained Transformer is a discretisation of its own continuous-depth flow",
        ", ".join(
            f"{m}: final states {r[m]['flow_final']:.2g} from the flow (Lie–Trotter at h "
            f"= {config['flow_step']:g})"
            for m in MODELS
        ),
        "agrees" if max(r[m]["flow_final"] for m in MODELS) < 0.1 else "differs",
    )
    loop = fw.Claim(
        "One real layer looped (an autonomous flow with real weights) drives tokens to "
        "consensus, 1 − mean_j |cos(x_0, x_j)| → 0",
        ", ".join(
            f"{m}: {r[m]['loop_gap_start']:.3f} → {r[m]['loop_gap_end']:.3g} after "
            f"{config['loop_passes']} passes (norms ×{r[m]['loop_norm_end']:.3g})"
            for m in MODELS
        ),
        "agrees"
        if max(r[m]["loop_gap_end"] for m in MODELS) < 0.05
        else ("partly" if min(r[m]["loop_gap_end"] for m in MODELS) < 0.05 else "differs"),
    )
    summary = (
        f"{n} sentences through MiniLM (Post-LN), SmolLM2 (Pre-LN) and Gemma-3-270M (Peri-LN), "
        "all read by tpde.pretrained.load: attention makes "
        + ", ".join(f"{r[m]['share_attn_mean']:.0%} ({m})" for m in MODELS)
        + " of the layers' updates on average; token norms grow "
        + ", ".join(f"×{growth[m]:.3g} ({m})" for m in MODELS)
        + "."
    )
    figures = [("real_models.png", "Per layer (relative depth), median over sentences with "
                "quartiles: attention's share of the update, token norms, update size, mean "
                "cosine, clusters, attention sink; the network against its flow; one layer "
                "looped.")]  # fmt: skip
    notes = [
        "Weights: MiniLM's safetensors; SmolLM2's Q4_1 GGUF and Gemma-3-270M's Q4_K_M GGUF, "
        "dequantised; float32 throughout.",
        "The attention share is ‖v_attn‖/(‖v_attn‖ + ‖v_mlp‖) with token-mean norms of the "
        "exact per-sublayer split (after the norms acting on each sublayer); 'split error' is "
        "how far Σ_k v_{l,k} is from x_{l+1} − x_l (float32 rounding).",
        "The looped layer is the middle one (MiniLM 3, SmolLM2 15, Gemma-3 9), started from "
        "its own input tokens of the first sentence.",
    ]
    return fw.Report(summary, [norms, flow, loop], figures, tables=[_table(r)], notes=notes)
