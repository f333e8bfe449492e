r"""The theory's predictions about norm placement, measured alike on a network and on its
idealised sphere model (MATH.md §7; :mod:`.ideal`).

From tokens x_l (n, d) at depths l = 0 … L, per layer (token means):

- radius r_l = mean_i |x_{l,i}|;
- angle swept α_l = mean_i ∠(x_{l,i}, x_{l+1,i}), at the mean norm r̄_l = mean_i
  (|x_{l,i}| + |x_{l+1,i}|)/2 (∠(u, v) = 2 atan2(|û − v̂|, |û + v̂|), right for tiny angles);
- update size u_l = mean_i |x_{l+1,i} − x_{l,i}| / √d;
- mean pairwise cosine c_l.

Per sentence, from those curves: (a) r_L/r_0, max_l |r_l/r_0 − 1|, and R² of the fits of r
against l (linear growth) and of log r against l (exponential growth); (b) the slope s of
log α_l against log r̄_l over the layers (the angular speed ∝ r^s: Pre-LN θ̇ = P⊥Γ/r and
Peri-LN θ̇ = P⊥N(Γ)/r give s = −1 while |P⊥Γ| stays put; Post-LN keeps r fixed, s = 0 or
undefined); (c) the spread of u across layers, std/mean (Peri-LN: unit-speed updates, 0);
(d) c_0 → c_L and the share of layers where c rises (all: tokens cluster).

(b) also moves with |P⊥Γ|, which the clustering changes along the way: the idealised
model's own s shows how far that alone takes it from −1.

The verdicts (:func:`verdicts`) compare the numbers with fixed tolerances, stated in
:data:`RULES` and in the report's notes; none is written by hand.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..common import real_normalised as nm

QUANTITIES = ("radius", "angle", "mid", "update", "cos")  # the per-layer curves
SCALARS = ("ratio", "deviation", "r2_lin", "r2_exp", "slope", "span", "update_cv",
           "cos_first", "cos_last", "cos_rising")  # fmt: skip
SLOPE_RANGE = 1e-6  # the slope of (b) needs log r̄ to vary by more than this across layers
FIXED = 1e-9  # (a) a radius within this relative range is fixed: its growth fits are NaN
# An angle swept below this many units of the tokens' float rounding is 0: two unit vectors
# of one direction differ by rounding (|û − v̂| ≈ 1e-16 in float64, 6e-8 in float32), whose
# size depends on the CPU, and a slope fitted to those logs would be noise.
ANGLE_ROUNDING = 64
RULES = {
    "fixed": 0.05,  # (a) Post-LN: max |r_l/r_0 − 1| ≤ 0.05 holds, ≤ 0.5 partly
    "fixed_partly": 0.5,
    "slope": 0.25,  # (b) |s − s_theory| ≤ 0.25 holds; the sign right (Pre/Peri s < 0) partly
    "cv": 0.25,  # (c) Peri-LN: std/mean of u ≤ 0.25 holds, ≤ 0.5 partly
    "cv_partly": 0.5,
}


# ---------------------------------------------------------------------- per-layer curves
def angles(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """∠(x_i, y_i) of each token pair (..., n, d) → (..., n), in [0, π]."""
    u, v = nm.on_unit_sphere(x), nm.on_unit_sphere(y)
    return 2 * torch.atan2((u - v).norm(dim=-1), (u + v).norm(dim=-1))


def swept(x: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """:func:`angles` with every angle below ``ANGLE_ROUNDING · eps`` (the rounding of the
    tokens' own float type) set to 0: an angle no float computation resolves."""
    a = angles(x, y)
    return torch.where(a < ANGLE_ROUNDING * eps, torch.zeros_like(a), a)


def curves(states: torch.Tensor) -> dict:
    """The per-layer curves of tokens ``states`` (L + 1, n, d) (module notes): radius and
    cos (L + 1,), angle, mid and update (L,)."""
    eps = torch.finfo(states.dtype).eps if states.is_floating_point() else 0.0
    x = states.double()
    r = x.norm(dim=-1)  # (L + 1, n)
    return {
        "radius": r.mean(-1).numpy(),
        "angle": swept(x[:-1], x[1:], eps).mean(-1).numpy(),
        "mid": ((r[:-1] + r[1:]) / 2).mean(-1).numpy(),
        "update": ((x[1:] - x[:-1]).norm(dim=-1).mean(-1) / math.sqrt(x.shape[-1])).numpy(),
        "cos": np.array([float(np.mean(nm.cosines(p))) for p in x]),
    }


# ---------------------------------------------------------------------- per-sentence numbers
def r_squared(x: np.ndarray, y: np.ndarray) -> float:
    """R² of the least-squares line through (x, y); NaN where y does not vary."""
    total = float(((y - y.mean()) ** 2).sum())
    if total == 0:
        return math.nan
    residual = y - np.polyval(np.polyfit(x, y, 1), x)
    return 1 - float((residual**2).sum()) / total


def log_slope(norms: np.ndarray, sizes: np.ndarray) -> float:
    """The least-squares slope of log ``sizes`` against log ``norms``; NaN where log norms
    vary by less than :data:`SLOPE_RANGE` or a size is 0."""
    if (sizes <= 0).any() or np.ptp(np.log(norms)) < SLOPE_RANGE:
        return math.nan
    return float(np.polyfit(np.log(norms), np.log(sizes), 1)[0])


def scalars(c: dict) -> dict:
    """Predictions (a)–(d) of one sentence from its :func:`curves` (module notes)."""
    r, layers = c["radius"], np.arange(len(c["radius"]), dtype=float)
    fixed = np.ptp(r) <= FIXED * r.mean()  # a radius fixed to rounding: no growth to fit
    return {
        "ratio": float(r[-1] / r[0]),
        "deviation": float(np.abs(r / r[0] - 1).max()),
        "r2_lin": math.nan if fixed else r_squared(layers, r),
        "r2_exp": math.nan if fixed else r_squared(layers, np.log(r)),
        "slope": log_slope(c["mid"], c["angle"]),
        "span": float(c["mid"].max() / c["mid"].min()),
        "update_cv": float(c["update"].std() / c["update"].mean()),
        "cos_first": float(c["cos"][0]),
        "cos_last": float(c["cos"][-1]),
        "cos_rising": float((np.diff(c["cos"]) > 0).mean()),
    }


def row(states: torch.Tensor, source: str) -> dict:
    """One sentence's curves and numbers, keys ``{source}_{quantity}``."""
    c = curves(states)
    out = {f"{source}_{k}": v for k, v in c.items()}
    out.update({f"{source}_{k}": v for k, v in scalars(c).items()})
    return out


def medians(a: dict, source: str) -> dict:
    """Medians over sentences of ``source``'s numbers (NaN-aware) and curves."""
    out = {k: float(nm.nanmedian(np.atleast_1d(a[f"{source}_{k}"]))) for k in SCALARS}
    out.update({f"{k}_by_layer": np.median(a[f"{source}_{k}"], axis=0).tolist()
                for k in QUANTITIES})  # fmt: skip
    return out


# ---------------------------------------------------------------------- the verdicts
def _fixed(m: dict) -> str:
    d = m["deviation"]
    return "holds" if d <= RULES["fixed"] else "partly" if d <= RULES["fixed_partly"] else "fails"


def _linear(m: dict) -> str:
    if not m["ratio"] > 1:
        return "fails"
    return "holds" if m["r2_lin"] >= m["r2_exp"] else "partly"


def _slope(target: float):
    def verdict(m: dict) -> str:
        s = m["slope"]
        if math.isnan(s):
            return "n/a"
        if abs(s - target) <= RULES["slope"]:
            return "holds"
        return "partly" if target < 0 and s < 0 else "fails"

    return verdict


def _constant(m: dict) -> str:
    cv = m["update_cv"]
    return "holds" if cv <= RULES["cv"] else "partly" if cv <= RULES["cv_partly"] else "fails"


def _rising(m: dict) -> str:
    if not m["cos_last"] > m["cos_first"]:
        return "fails"
    return "holds" if m["cos_rising"] == 1 else "partly"


def _num(value: float, spec: str) -> str:
    """``value`` formatted by ``spec``, NaN (undefined) as a dash."""
    return "—" if math.isnan(value) else format(value, spec)


def _fmt_a(m: dict) -> str:
    return (f"r_L/r_0 = {m['ratio']:.3g}, max|r_l/r_0 − 1| = {m['deviation']:.2g}; R² lin "
            f"{_num(m['r2_lin'], '.3f')} / exp {_num(m['r2_exp'], '.3f')}")  # fmt: skip


def _fmt_b(m: dict) -> str:
    """The slope of (b), or why it is undefined (:func:`log_slope`): r̄ fixed (log r̄ varies
    by less than :data:`SLOPE_RANGE`, or its span is unknown) or an angle swept of 0."""
    if math.isnan(m["slope"]):
        span = m["span"]
        if math.isnan(span) or math.log(span) < SLOPE_RANGE:
            return "undefined (r fixed)"
        return f"undefined (an angle swept is 0; r̄ over ×{span:.3g})"
    return f"s = {m['slope']:.2f} (r̄ over ×{m['span']:.3g})"


def _fmt_c(m: dict) -> str:
    return f"std/mean {m['update_cv']:.2f}"


def _fmt_d(m: dict) -> str:
    return f"{m['cos_first']:.2f} → {m['cos_last']:.2f}, rising in {m['cos_rising']:.0%} of layers"


#: Per scheme: (prediction, format, verdict) for each prediction the theory makes.
PREDICTIONS = {
    "post-ln": (
        ("(a) |x| fixed: r_l = r_0", _fmt_a, _fixed),
        ("(b) angle swept independent of r: s = 0", _fmt_b, _slope(0.0)),
        ("(d) tokens cluster: mean cosine rises", _fmt_d, _rising),
    ),
    "pre-ln": (
        ("(a) ṙ = ⟨θ, Γ⟩, Γ a function of θ: r grows at most linearly", _fmt_a, _linear),
        ("(b) angular speed |P⊥Γ|/r: s = −1", _fmt_b, _slope(-1.0)),
        ("(d) tokens cluster: mean cosine rises", _fmt_d, _rising),
    ),
    "peri-ln": (
        ("(a) unit-speed updates: r grows at most linearly", _fmt_a, _linear),
        ("(b) angular speed ∝ 1/r: s = −1", _fmt_b, _slope(-1.0)),
        ("(c) update size constant across layers", _fmt_c, _constant),
        ("(d) tokens cluster: mean cosine rises", _fmt_d, _rising),
    ),
}


def _nan(m: dict) -> dict:
    return {k: math.nan if v is None else v for k, v in m.items()}


def verdicts(scheme: str, ideal: dict, real: dict) -> list[dict]:
    """One row per prediction of ``scheme``: its text, the idealised and real numbers, and
    the verdict on each ("holds", "partly", "fails", or "n/a" where undefined). A number
    saved as None (JSON's NaN) reads as NaN."""
    ideal, real = _nan(ideal), _nan(real)
    return [
        {
            "prediction": text,
            "ideal": fmt(ideal),
            "real": fmt(real),
            "ideal_verdict": judge(ideal),
            "real_verdict": judge(real),
        }
        for text, fmt, judge in PREDICTIONS[scheme]
    ]


def overall(rows: list[dict]) -> str:
    """The claim's verdict from the real verdicts: "agrees" when all hold, "differs" when
    any fails (a failed prediction falsifies the claim, whatever the others do), "partly"
    otherwise (some only partly hold), "n/a" when none is defined (no rows, or every one
    "n/a")."""
    real = [r["real_verdict"] for r in rows if r["real_verdict"] != "n/a"]
    if not real:
        return "n/a"
    if all(v == "holds" for v in real):
        return "agrees"
    return "differs" if any(v == "fails" for v in real) else "partly"
