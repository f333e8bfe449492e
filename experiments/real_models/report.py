"""The ``real-models`` study's claims, tables and summary, from the saved data only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .. import framework as fw
from . import placement
from .config import MODELS, PLACEMENT, Config
from .ideal import SCHEME


def _table(r: dict) -> str:
    rows = []
    for name in MODELS:
        m = r[name]
        top1 = "—" if m["top1_flow"] is None else f"{m['top1_flow']:.0%}"
        rows.append([
            f"{name} ({PLACEMENT[name]})", f"{m['share_attn_mean']:.2f}",
            f"×{m['norm_growth']:.3g}",
            f"{m['update_mean']:.3g}", f"{m['cos_first']:.2f} → {m['cos_last']:.2f}",
            f"{m['directions_last']:.3g}", f"{m['sink_mean']:.2f} (max {m['sink_max']:.2f})",
            f"{m['flow_final']:.2g}", top1,
            f"{m['loop_gap_start']:.3f} → {m['loop_gap_end']:.3g}", f"{m['split_error_max']:.1e}",
        ])  # fmt: skip
    header = ["model", "attention share", "norm growth", "mean update", "mean cos (0 → L)",
              "directions (L)", "first-token attention", "flow distance (L)", "flow top-1",
              "looped layer: gap", "split error"]  # fmt: skip
    return fw.markdown_table(header, rows)


def _norm_parts(growth: dict, update: dict) -> list[tuple[str, bool]]:
    """The norm claim's three parts, each with whether it holds: Post-LN's norms stay
    within ×2, Pre-LN's grow beyond ×2, and Peri-LN's updates, bounded by its output norm,
    are relatively smaller than Pre-LN's (mean relative update under half SmolLM2's). A
    failed part falsifies the claim (its verdict is then "differs")."""
    return [
        ("Post-LN norms within ×2 (MiniLM)", growth["minilm"] < 2),
        ("Pre-LN norms grow beyond ×2 (SmolLM2)", growth["smollm2"] > 2),
        ("Peri-LN relative update under half Pre-LN's (Gemma-3 vs SmolLM2)",
         update["gemma3"] < 0.5 * update["smollm2"]),
    ]  # fmt: skip


def _predictions(r: dict) -> dict:
    """Per model, the rows of :func:`placement.verdicts` from the saved medians."""
    return {m: placement.verdicts(SCHEME[m], r[m]["ideal"], r[m]["real"]) for m in MODELS}


def _holding(rows: list[dict]) -> str:
    """'k/n (j/m)': how many predictions hold in the real weights (in the idealised model,
    out of those that apply to it: Post-LN's angle-radius slope does not, its r is fixed)."""
    real = sum(row["real_verdict"] == "holds" for row in rows)
    ideal = sum(row["ideal_verdict"] == "holds" for row in rows)
    applies = sum(row["ideal_verdict"] != "n/a" for row in rows)
    return f"{real}/{len(rows)} ({ideal}/{applies})"


def _prediction_table(name: str, rows: list[dict], m: dict) -> str:
    header = [f"{name} ({PLACEMENT[name]}): prediction", f"idealised (β = {m['beta']:.3g})",
              "real", "verdict (real; idealised)"]  # fmt: skip
    body = [[row["prediction"], row["ideal"], row["real"],
             f"{row['real_verdict']}; {row['ideal_verdict']}"] for row in rows]  # fmt: skip
    escaped = [[str(cell).replace("|", "\\|") for cell in line] for line in body]
    return fw.markdown_table(header, escaped)


def _placement_claims(predictions: dict) -> list:
    """One claim per model: the theory's predictions for its placement, with the numbers."""
    out = []
    for name, rows in predictions.items():
        outcome = "; ".join(
            f"{row['prediction']}: real {row['real']} ({row['real_verdict']}), idealised "
            f"{row['ideal']} ({row['ideal_verdict']})"
            for row in rows
        )
        out.append(fw.Claim(
            f"MATH.md §7's predictions for {PLACEMENT[name]} hold in {name}'s real weights as "
            f"in the idealised sphere model with the same placement",
            outcome, placement.overall(rows),
        ))  # fmt: skip
    return out


def _placement_notes(r: dict) -> list[str]:
    rules = placement.RULES
    return [
        "The idealised model of each network: tpde's Normalized(Softmax(Q = K = V = I, score "
        "β⟨x, y⟩), scheme), scheme Post-LN (MiniLM), Pre-LN (SmolLM2), Peri-LN (Gemma-3), in "
        "the network's width d, started from the network's own embedded tokens x_0 of each "
        "sentence (Post-LN: x_0/|x_0|), RK4 over t ∈ [0, L] with saves at every integer t "
        "(depth l ↔ t = l). Statuses: "
        + ", ".join(f"{m} {'/'.join(r[m]['ideal_status'])}" for m in MODELS)
        + ".",
        "β rule: one β per model, chosen so that the idealised model's median normalised "
        "attention entropy at t = 0 (each row's entropy over the log of the keys it sees) "
        "equals the network's first-layer median (every head, query and sentence; a causal "
        "row i sees i + 1 keys, the idealised model's all n): "
        + ", ".join(
            f"{m} β = {r[m]['beta']:.4g} (entropy {r[m]['entropy_network']:.3f} → "
            f"{r[m]['entropy_ideal']:.3f})"
            for m in MODELS
        )
        + ". Normalising by the log of the keys makes a causal decoder's rows and the "
        "idealised model's comparable.",
        "Measured alike on both, per layer, median over sentences: r_l the token-mean norm; "
        "the angle swept per layer (token mean of ∠(x_l, x_{l+1})) at the mean norm r̄_l; "
        "‖x_{l+1} − x_l‖/√d (token mean); the mean pairwise cosine. s is the slope of log "
        "angle against log r̄ over the layers, 'R² lin / exp' the fits of r and of log r "
        "against l. Verdict rules, fixed before the run: (a) Post-LN holds when max|r_l/r_0 "
        f"− 1| ≤ {rules['fixed']}, partly ≤ {rules['fixed_partly']}; Pre/Peri-LN holds when "
        "r grows and R² lin ≥ R² exp, partly when it grows; (b) holds when |s − s_theory| ≤ "
        f"{rules['slope']}, partly when s < 0 for s_theory = −1; (c) holds when std/mean ≤ "
        f"{rules['cv']}, partly ≤ {rules['cv_partly']}; (d) holds when the mean cosine rises "
        "in every layer, partly when it ends higher than it starts. A model's claim agrees "
        "when every defined prediction holds and differs when any fails (partly otherwise).",
        "(b) mixes two effects: the radius and |P⊥Γ|, which clustering changes as the run "
        "goes on; the idealised model's s is the theory's own value with that effect in. In "
        "a real Pre-LN or Peri-LN layer Δx = f(N(x)) does not depend on |x| (the norm "
        "removes it), so s ≠ −1 across depth means the trained layers' update sizes change "
        "with depth. The real MiniLM's norms vary only through its LayerNorm gains; its s "
        "is taken over that narrow range (r̄ span in the table).",
    ]


def report(out: Path) -> fw.Report:
    config, arrays, r = fw.load(out)
    n = len(arrays["minilm_lengths"])
    growth = {name: r[name]["norm_growth"] for name in MODELS}
    predictions = _predictions(r)
    update = {name: r[name]["update_mean"] for name in MODELS}
    parts = _norm_parts(growth, update)
    norms = fw.Claim(
        "Norm placement regulates token norms (Karagodin et al.): Post-LN keeps them fixed, "
        "Pre-LN lets them grow, Peri-LN grows them but bounds each update by its output norm",
        ", ".join(
            f"{m} ({PLACEMENT[m]}): norms ×{growth[m]:.3g} over the stack, mean relative "
            f"update {update[m]:.3g}"
            for m in MODELS
        )
        + "; "
        + ", ".join(f"{text}: {'holds' if ok else 'fails'}" for text, ok in parts),
        "agrees" if all(ok for _, ok in parts) else "differs",
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
        + ". Of MATH.md §7's predictions for each placement, in real weights (idealised "
        "model in brackets) "
        + ", ".join(f"{m} {_holding(rows)}" for m, rows in predictions.items())
        + " hold."
    )
    figures = [("real_models.png", "Per layer (relative depth), median over sentences with "
                "quartiles: attention's share of the update, token norms, update size, mean "
                "cosine, effective number of directions n²/Σcos², attention sink; the network "
                "against its flow; one layer looped."),
               ("real_models_split.png", "One row per model, by layer, median over sentences "
                "with quartiles: the split's token-mean |v_attn| and |v_mlp| over |x_l|, the "
                "cosine between v_attn and v_mlp; then the network (solid) against its "
                "idealised sphere model (dashed): r_l/r_0, the angle swept per layer against "
                "the mean norm (log–log), ‖x_{l+1} − x_l‖/√d, the mean cosine.")]  # fmt: skip
    tables = [_table(r)] + [_prediction_table(m, predictions[m], r[m]) for m in MODELS]
    notes = [
        "Weights: MiniLM's safetensors; SmolLM2's Q4_1 GGUF and Gemma-3-270M's Q4_K_M GGUF, "
        "dequantised; float32 throughout.",
        "The attention share is ‖v_attn‖/(‖v_attn‖ + ‖v_mlp‖) with token-mean norms of the "
        "exact per-sublayer split (after the norms acting on each sublayer); 'split error' is "
        "how far Σ_k v_{l,k} is from x_{l+1} − x_l (float32 rounding).",
        "The looped layer is the middle one (MiniLM 3, SmolLM2 15, Gemma-3 9), started from "
        "its own input tokens of the first sentence.",
        *_placement_notes(r),
    ]
    claims = [norms, flow, loop, *_placement_claims(predictions)]
    if n < Config().sentences:  # a quick run: the verdicts say so
        notes.append(_indicative_note(n))
        claims = [replace(c, verdict=f"{c.verdict} (indicative: {n} sentences)") for c in claims]
    return fw.Report(summary, claims, figures, tables=tables, notes=notes)


def _indicative_note(n: int) -> str:
    return (
        f"A quick run: {n} sentence(s) instead of {Config().sentences}, fewer flow sentences "
        "and loop passes. Every verdict is marked indicative: medians over so few sentences "
        "are not the full run's, and a verdict may change at full size."
    )
