r"""The idealised sphere model of each real model: GLPR's softmax under the same norm placement.

For a model with L layers, width d and placement P (MiniLM Post-LN, SmolLM2 Pre-LN,
Gemma-3 Peri-LN), the idealised model is ``Normalized(Softmax(Q = K = V = I, score
β⟨x, y⟩), P)`` (:func:`experiments.common.schemes.scheme_field`; MATH.md §7):

- Post-LN: ẋ = P⊥_x Γ[μ](x) on S^{d−1} (|x| = 1 for ever);
- Pre-LN: ẋ = Γ[N#μ](N(x)), so ṙ = ⟨θ, Γ⟩ and θ̇ = P⊥_θΓ/r;
- Peri-LN: ẋ = N(Γ[N#μ](N(x))), unit speed;

Γ[μ](x) = Σ_j softmax_j(β⟨x, x_j⟩) x_j. It starts from the model's own embedded tokens x_0
of the sentence (Post-LN: x_0/|x_0|, the sphere the scheme requires) and runs over
t ∈ [0, L] by RK4 at a fixed step with saves at every integer t, so that depth l of the
network and t = l of the model are compared.

β (one per model) is calibrated on the real weights: the idealised model's median
normalised attention entropy at t = 0 equals the network's first layer's (rows of every
head and sentence; the entropy of a row divided by the log of the number of keys it may
see, so a causal decoder's rows, which see i + 1 keys, compare with the idealised model's,
which see all n). The entropy falls as β grows (a Gibbs family), so the median does too
and bisection on log β finds the β.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from tpde.flows import integrate
from tpde.measures import Empirical

from ..common.schemes import glpr_softmax, scheme_start
from .config import PLACEMENT

#: The tpde scheme of each model's norm placement (MATH.md §7): config's PLACEMENT in
#: tpde's spelling ("Post-LN" → "post-ln").
SCHEME = {model: placement.lower() for model, placement in PLACEMENT.items()}
BETA_RANGE = (1e-3, 1e4)  # the bisection's bracket for β
F64 = torch.float64


def ideal_start(field, points: torch.Tensor) -> Empirical:
    """The idealised model's depth-0 tokens: the network's x_0 (n, d) in float64, put on the
    unit sphere where the scheme's tokens live there (Post-LN)."""
    mu = Empirical(points.to(F64))
    return scheme_start(field, mu.normalized() if field.scheme.on_sphere else mu)


def ideal_states(field, points: torch.Tensor, depth: int, step: float):
    """Tokens of the idealised model at t = 0, 1, …, depth: ((depth + 1, n, d), status).

    RK4 at the fixed ``step`` (1/k) from :func:`ideal_start`; the sphere schemes renormalise
    after every step.
    """
    trajectory = integrate(field, ideal_start(field, points), float(depth), dt=step,
                           method="rk4", save=depth + 1, events=())  # fmt: skip
    return torch.stack([m.points for m in trajectory.measures]), str(trajectory.status)


# ---------------------------------------------------------------------- the entropies
def normalised_entropy(weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """H(w_i)/log k_i of each attention row: weights (..., n, m), keys (n,) the number of
    keys row i may see (≥ 2: a row with one key has no entropy to compare). In [0, 1]."""
    w = weights.double()
    entropy = -(torch.where(w > 0, w * w.log(), torch.zeros_like(w))).sum(-1)
    return entropy / keys.double().log()


def network_entropies(model, tokens: list[torch.Tensor]) -> np.ndarray:
    """The network's first-layer normalised attention entropies: every row of every head of
    every sentence whose query may see ≥ 2 keys (a causal mask, where the probabilities
    above the diagonal are all 0, lets row i see i + 1)."""
    out = []
    for x in tokens:
        w = model.attention_weights(x, 0)  # (H, n, n)
        n = w.shape[-1]
        causal = bool((torch.triu(w, 1) == 0).all())
        keys = torch.arange(1, n + 1) if causal else torch.full((n,), n)
        rows = keys >= 2
        out.append(normalised_entropy(w[..., rows, :], keys[rows]).reshape(-1).numpy())
    return np.concatenate(out)


def ideal_scores(tokens: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sentence, the idealised field's scores at β = 1 and its key bias: (⟨N(x_i),
    N(x_j)⟩ (n, n), log-weights (n,)), read from :func:`glpr_softmax`'s softmax form at the
    normalised tokens that every scheme's field reads. The field's scores at β are β times
    these (A = βI), so one reading serves every β."""
    out = []
    for x in tokens:
        mu = Empirical(x.to(F64)).normalized()
        form = glpr_softmax(1.0, x.shape[-1]).softmax_form(0.0, mu, mu.points)
        out.append((form.queries @ form.keys.transpose(-1, -2), form.key_bias))
    return out


def ideal_entropies(beta: float, scores: list) -> np.ndarray:
    """The idealised model's normalised attention entropies at t = 0, every query of every
    sentence (n keys each): the rows of softmax(β⟨N(x_i), N(x_j)⟩ + log w_j), ``scores``
    from :func:`ideal_scores`."""
    out = []
    for s, bias in scores:
        w = torch.softmax(beta * s + bias, dim=-1)
        out.append(normalised_entropy(w, torch.full((len(s),), len(s))).numpy())
    return np.concatenate(out)


def calibrate_beta(target: float, tokens: list[torch.Tensor], *, iterations: int = 50) -> float:
    """The β whose median idealised entropy at t = 0 (:func:`ideal_entropies`) on the
    sentences' tokens (n, d) equals ``target``: bisection on log β over :data:`BETA_RANGE`
    (the median falls as β grows; 50 halvings leave β within a relative 1e-14). A target
    outside what the bracket reaches raises."""
    lo, hi = (math.log(b) for b in BETA_RANGE)
    scores = ideal_scores(tokens)

    def median(log_beta: float) -> float:
        return float(np.median(ideal_entropies(math.exp(log_beta), scores)))

    if not median(hi) <= target <= median(lo):
        raise ValueError(
            f"the target entropy {target:.4g} is outside what β in {BETA_RANGE} reaches "
            f"({median(hi):.4g} … {median(lo):.4g}): tokens too few or all equal?"
        )
    for _ in range(iterations):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if median(mid) > target else (lo, mid)
    return math.exp((lo + hi) / 2)
