"""Masked (causal) attention: tokens carry positions and attend only to earlier ones."""

from __future__ import annotations

import torch

from tpde._engines import check_engine
from tpde._validation import as_tensor, check_finite, check_positive
from tpde.fields.attention.positions import ALiBi
from tpde.fields.base import Field, GaussianNotPreserved, check_no_overflow
from tpde.fields.calls import check_own, own_tokens, query_positions
from tpde.fields.forms import key_positions
from tpde.fields.registry import register, variant
from tpde.measures import Empirical, Gaussian, Grid, Measure

__all__ = ["Masked"]

NO_GAUSSIAN = (
    "masked attention needs token positions, and a Gaussian carries none: there is no "
    "Gaussian closure. Sample particles with positions instead, e.g. "
    "Empirical(g.sample(n), positions=torch.linspace(0, 1, n))."
)


class Masked(Field):
    r"""Causal attention: a token at position s attends to the tokens at positions r ≤ s.

    Γ[μ](s, x) = ∫_{r ≤ s} k(x, y) V y dμ(r, y) / ∫_{r ≤ s} k(x, y) dμ(r, y)
    (MATH.md §2, "Masked (causal)"), with the kernel k of the wrapped field.

    Parameters
    ----------
    field : Softmax, L2, Cosine … (capability "softmax_form") or Exponential ("kernel_form")
        A single-head field whose kernel is a softmax (exponential) kernel, normalised or
        not; its parameters (tensors or callables of t) are used as they are.
    sink_mass : float
        Mass m ≥ 0 of an external attention sink (default 0: none; see below).
    sink_point : tensor (d,), optional
        Location z of the external sink; default the origin.
    strict : bool
        False (default): keys at r ≤ s (a token sees itself). True: keys at r < s only (a
        token at the smallest position sees nothing and does not move).
    position_bias : ALiBi(slopes=(m,)) or callable, optional
        Position-dependent key weights: key j weighs w_j e^{g(r_j)} instead of w_j, with
        g(r) = m·r for ALiBi (the penalty −m(s − r), whose −m·s cancels below), or
        g = position_bias(positions) for a callable (n,) → (n,).

    Notes
    -----
    Unnormalised kernels and key weights. With J(s) the keys a query at s sees and
    a_j(s) = w_j e^{g(r_j)} / Σ_{k ∈ J(s)} w_k e^{g(r_k)} the key weights normalised over
    J(s) (the "predecessors"), Exponential gives ::

        Γ[μ](s, x) = Σ_{j ∈ J(s)} a_j(s) e^{⟨q(x), k_j⟩} v_j

    and a softmax form ::

        Γ[μ](s, x) = Σ_{j ∈ J(s)} a_j(s) e^{⟨q, k_j⟩} v_j / Σ_{j ∈ J(s)} a_j(s) e^{⟨q, k_j⟩}

    and Γ = 0 where J(s) is empty. With ``strict=True``, ALiBi and Exponential on the circle
    under post-LN this is the causal model of Duerinckx, Geshkovski and Rossi ("Kinetic
    theory for Transformers and the lost-in-the-middle phenomenon", arXiv:2605.09213,
    2026): earlier keys only, the first token frozen, position-only weights normalised over
    the predecessors (examples/plot_18_lost_in_the_middle.py). These options (and any
    unnormalised kernel) are computed densely (O(m·n) memory; engines "auto", "dense").

    Tokens are the particles of an :class:`Empirical` built with ``positions`` s_i ≥ 0
    (for a sequence, s_i = i/(n − 1) ∈ [0, 1], or the integer indices i: the mask depends
    only on the order); positions never move. Particles:
    ẋ_i = V Σ_{j: s_j ≤ s_i} w_j k(x_i, x_j) x_j / Σ_{j: s_j ≤ s_i} w_j k(x_i, x_j), ties
    included, so a token always sees itself and the token at the smallest position only
    sees itself (and its ties): ẋ = Vx under softmax.

    Attention sink. Every query sees the tokens at position 0: they are the atom of the
    position marginal at s = 0, the sink of MATH.md §2, which a measure carries whenever
    it puts tokens (of any mass) at s = 0, e.g. a first token at s_0 = 0 with weight m
    for a mean-field limit with a sink of mass m. Those tokens move like the others (they
    attend to each other). Optionally, ``sink_mass = m > 0`` adds an *external* sink, the
    point mass m·δ_z at position 0 which is no token: it is attended by every query, with
    weight m against the tokens' total 1, and it does not move. With softmax and z = 0 it
    adds m to every normaliser and nothing to the numerators (a "null" sink, as
    softmax-off-by-one does).

    Engines: "dense" and "chunked" mask the scores; "sdpa" runs one ``is_causal`` kernel
    on the tokens stably sorted by position, where a tie group of g tokens is given g − 1
    extra slots so that ties see each other (no n×n mask is built;
    :func:`tpde._engines.torch_engines.causal_slots`); "keops" masks with ``ifelse``.

    Gaussians carry no positions, so there is no Gaussian closure.
    """

    def __init__(
        self,
        field: Field,
        *,
        sink_mass: float = 0.0,
        sink_point=None,
        strict: bool = False,
        position_bias=None,
    ):
        if not isinstance(field, Field) or not (
            field.supports("softmax_form") or field.supports("kernel_form")
        ):
            raise TypeError(
                f"Masked wraps a field whose attention is one softmax average (capability "
                f"'softmax_form': Softmax, L2, Cosine …) or one exponential kernel sum "
                f"('kernel_form': Exponential); received {type(field).__name__}. Mask each "
                "head of a MultiHead instead."
            )
        self.field = field
        self.dim = field.dim
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be True or False; received {strict!r}.")
        self.strict = strict
        self.position_bias = _check_position_bias(position_bias)
        self.sink_mass = check_positive(sink_mass, "sink_mass", strict=False)
        if self.sink_mass and not self._engine_path:
            raise ValueError(
                "sink_mass is an external key at position 0 of a softmax average with the "
                "inclusive mask; with strict=True, a position_bias or an unnormalised kernel "
                "put the sink in μ as a token at position 0 instead (Empirical(points, "
                "weights, positions))."
            )
        if sink_point is None:
            self.sink_point = None
        else:
            point = as_tensor(sink_point, "sink_point")
            if point.shape != (self.dim,):
                raise ValueError(
                    f"sink_point must have shape ({self.dim},) like a token; received "
                    f"{tuple(point.shape)}."
                )
            check_finite(point, "sink_point")
            self.sink_point = point

    # ------------------------------------------------------------------ particles
    def velocity(
        self,
        mu: Measure,
        x=None,
        *,
        positions=None,
        t: float = 0.0,
        engine: str = "auto",
        info=None,
    ):
        """Γ[μ](s, x): at μ's own tokens, or at points ``x`` (m, d) with ``positions`` (m,).

        See :meth:`Field.velocity` (``info`` too: a stack's piece is called with it);
        ``positions`` are the query positions (≥ 0) and are required with ``x`` (and refused
        without it).
        """
        return velocity_at_positions(
            self, mu, x, positions, engine, "masked attention", self._masked_velocity, t=t,
            info=info,
        )  # fmt: skip

    def children(self) -> tuple[Field, ...]:
        """The masked field."""
        return (self.field,)

    @property
    def time_dependent(self) -> bool:
        return self.field.time_dependent

    @property
    def needs_positions(self) -> bool:
        return True

    def particle_velocity(
        self, t, mu: Empirical, x, engine: str, info=None, positions=None, *, own=None
    ) -> torch.Tensor:
        """Γ[μ](x) at μ's own tokens (``own``; x: (…, n, d), a batch of clouds or one), or
        at points x with their ``positions`` (m,) (checked by the caller)."""
        own = check_own(own, x, mu)
        if positions is not None:
            return self._masked_velocity(t, mu, x, positions, engine)
        own_tokens(x, mu, "masked attention", own)
        return self._masked_velocity(t, mu, x, mu.positions, engine)

    @property
    def _engine_path(self) -> bool:
        """Whether the softmax engines' causal mask computes this field (inclusive mask, no
        position bias, a softmax form); otherwise the dense masked sum (:func:`_masked_sum`)."""
        return (
            not self.strict and self.position_bias is None and self.field.supports("softmax_form")
        )

    def _masked_velocity(self, t, mu: Empirical, x, query_positions, engine):
        if not self._engine_path:
            if engine not in ("auto", "dense"):
                raise ValueError(
                    f"masked attention with strict=True, a position_bias or an unnormalised "
                    f"kernel is computed densely; engine must be 'auto' or 'dense'; received "
                    f"{engine!r}."
                )
            return _masked_sum(self, t, mu, x, query_positions)
        keys_measure = self._with_sink(mu)
        form = self.field.softmax_form(t, keys_measure, x)
        return form.velocity(
            engine, query_positions=query_positions, key_positions=key_positions(keys_measure)
        )

    def _with_sink(self, mu: Empirical) -> Empirical:
        """μ plus the external sink m·δ_z at position 0 (weights renormalised by 1 + m)."""
        if self.sink_mass == 0:
            return mu
        like = mu.points
        if self.sink_point is None:
            point = like.new_zeros(self.dim)
        else:
            point = self.sink_point.to(dtype=like.dtype, device=like.device)
        mass = torch.full((1,), self.sink_mass, dtype=like.dtype, device=like.device)
        point = point.expand(*like.shape[:-2], 1, self.dim)  # one sink per cloud of a batch
        return Empirical(
            torch.cat([like, point], dim=-2),
            torch.cat([mu.weights, mass]) / (1 + self.sink_mass),
            torch.cat([mu.positions, torch.zeros_like(mass)]),
        )

    # ------------------------------------------------------------------ Gaussians
    def gaussian_refusal(self) -> str:
        return NO_GAUSSIAN

    # ------------------------------------------------------------------ checks
    def check_measure_kind(self, mu) -> None:
        """Token positions: no Grid, no Empirical without positions, no Gaussian."""
        if isinstance(mu, Grid):
            raise ValueError(
                "masked attention needs token positions, and a Grid carries none: integrate "
                "particles with positions, Empirical(points, positions=s)."
            )
        if isinstance(mu, Empirical) and mu.positions is None:
            raise ValueError(
                "masked attention needs token positions, but this Empirical has none: build "
                "it with Empirical(points, positions=s), s of shape (n,), s ≥ 0 (for a "
                "sequence, s_i = i / (n - 1))."
            )
        if isinstance(mu, Gaussian):
            raise GaussianNotPreserved(NO_GAUSSIAN)

    def __repr__(self) -> str:
        sink = f", sink_mass={self.sink_mass:g}" if self.sink_mass else ""
        strict = ", strict=True" if self.strict else ""
        bias = "" if self.position_bias is None else f", position_bias={self.position_bias!r}"
        return f"Masked({self.field!r}{sink}{strict}{bias})"


def _check_position_bias(bias):
    """None, an ALiBi with one slope (log-weight −m·(s − r): key bias +m·r), or a callable
    ``positions (n,) -> log-weights (n,)`` of the keys."""
    if bias is None or callable(bias):
        return bias
    if isinstance(bias, ALiBi):
        if bias.slopes is None or len(bias.slopes) != 1:
            raise ValueError(
                "Masked takes an ALiBi with one slope, ALiBi(slopes=(m,)) (a single softmax or "
                f"kernel: one head); received {bias!r}. Give each head of a MultiHead its own."
            )
        return bias
    raise TypeError(
        f"position_bias must be None, ALiBi(slopes=(m,)) or a callable mapping the key "
        f"positions (n,) to log-weights (n,); received {type(bias).__name__}."
    )


def _key_log_bias(bias, positions: torch.Tensor) -> torch.Tensor:
    """The position bias's log-weights of the keys (n,), checked."""
    if isinstance(bias, ALiBi):
        return bias.key_bias(positions, 1)[0]
    out = torch.as_tensor(bias(positions), dtype=positions.dtype, device=positions.device)
    if out.shape != positions.shape or not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"position_bias(positions) must return one finite log-weight per key, shape "
            f"{tuple(positions.shape)}; received shape {tuple(out.shape)}"
            f"{'' if out.shape != positions.shape else ' with non-finite entries'}."
        )
    return out


def _masked_sum(field: Masked, t, mu: Empirical, x, query_positions) -> torch.Tensor:
    r"""Γ[μ](s_i, x_i) = Σ_{j ∈ J_i} a_ij K_ij v_j, densely (module notes of :class:`Masked`).

    J_i: the keys at r_j ≤ s_i (r_j < s_i with ``strict``); a_ij = w_j e^{g(r_j)} /
    Σ_{k ∈ J_i} w_k e^{g(r_k)} the key weights (masses times the position bias, normalised
    over J_i); K_ij = e^{⟨q_i, k_j⟩} (kernel form) or the softmax of the scores over J_i
    (softmax form, where the normalisation of a_ij cancels). Γ = 0 where J_i is empty.
    """
    keys_at = key_positions(mu)
    inner = field.field
    if inner.supports("softmax_form"):
        form = inner.softmax_form(t, mu, x)
        queries, keys, log_w, values = form.queries, form.keys, form.key_bias, form.points
    else:
        form = inner.kernel_form(t, mu, x)
        queries, keys, log_w, values = form
    if field.position_bias is not None:
        log_w = log_w + _key_log_bias(field.position_bias, keys_at)
    later = (
        keys_at.unsqueeze(-2) >= query_positions.unsqueeze(-1)
        if field.strict
        else (keys_at.unsqueeze(-2) > query_positions.unsqueeze(-1))
    )  # (m, n): the keys each query does not see
    log_a = torch.where(later, -torch.inf, log_w.unsqueeze(-2))  # (..., m, n)
    seen = ~later.all(-1, keepdim=True)  # (m, 1): queries with at least one key
    log_a = log_a - torch.logsumexp(log_a, -1, keepdim=True).where(seen, 0.0)
    logits = log_a + queries @ keys.transpose(-1, -2)
    if inner.supports("softmax_form"):
        weights = torch.softmax(logits.where(seen, 0.0), -1).where(seen, 0.0)
        return form.finish(weights @ values).where(seen, 0.0)
    return logits.exp() @ values


def velocity_at_positions(
    field, mu, x, positions, engine, who: str, evaluate, *, t: float, info=None, uses=True
):
    """The public velocity of a field with positions (:meth:`Masked.velocity` and the
    decoder attention's): at μ's own tokens (x None, or a field that ``uses`` no positions)
    through :meth:`Field.velocity`; at points x with their ``positions``: checks, then
    ``evaluate(t, mu, x, positions, engine)``, then the overflow check."""
    if x is None or not uses:
        query_positions(positions, x, who, uses)  # refuses positions without x
        return Field.velocity(field, mu, x, t=t, engine=engine, info=info)
    engine = check_engine(engine)
    field.check_measure(mu)
    x = field.check_points(x, mu)
    out = evaluate(t, mu, x, query_positions(positions, x, who, uses), engine)
    check_no_overflow(out, mu, f"the velocity Γ[μ] of {who}")
    return out


@register("masked", head=False, positions=True)
def _causal(Q, K, V, scale=None, *, kind: str = "softmax", **options):
    """Causal (masked) attention over a softmax-form variant (softmax by default)."""
    return Masked(variant(kind, head=True).build(Q, K, V, scale, **options))
