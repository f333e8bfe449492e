"""Field parameters, constant or functions of depth-time t: the public kit of a new field.

:class:`QKV` (Q, K, V, their biases and the scale β) and :class:`HeadParams` (the same at
one time) for attention variants; :class:`Weights` (named weights whose shapes must chain)
and :func:`linear` (x Wᵀ + b with batch dimensions) for feed-forward fields and projections
(docs/EXTENDING.md).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tpde._validation import as_parameter, as_tensor, check_finite, check_positive
from tpde.metrics.mobility import NotAGradientFlow

__all__ = ["QKV", "HeadParams", "Weights", "linear"]


def evaluate_parameter(param, name: str, t: float) -> torch.Tensor | None:
    """A parameter at time t: a tensor (or None) as is, a callable evaluated and checked."""
    if param is None or isinstance(param, torch.Tensor):
        return param
    value = as_tensor(param(t), f"{name}({t})")
    check_finite(value, f"{name}({t})")
    return value


@dataclass(frozen=True)
class HeadParams:
    """Parameters of one head resolved at a time t, on the measure's dtype and device.

    Q, K : (..., k, d);  V : (..., d, d);  scale : float;  biases (or None):
    bq, bk : (..., k) (queries Qx + b_q, keys Ky + b_k);  bv : (..., d) (values Vy + b_v).
    """

    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    scale: float
    bq: torch.Tensor | None = None
    bk: torch.Tensor | None = None
    bv: torch.Tensor | None = None

    @property
    def A(self) -> torch.Tensor:
        """Interaction matrix A = scale · Kᵀ Q, shape (..., d, d)."""
        return self.scale * self.K.transpose(-1, -2) @ self.Q

    @property
    def query_shift(self) -> torch.Tensor | None:
        """c = scale · Kᵀ b_q, shape (..., d): with a query bias the score is yᵀ(Ax + c).

        (Qx + b_q)·(Ky + b_k) = yᵀKᵀQx + yᵀKᵀb_q + terms free of y; the terms free of the
        key y cancel in every normalised attention, so b_k drops out of softmax.
        """
        if self.bq is None:
            return None
        return self.scale * (self.K.transpose(-1, -2) @ self.bq.unsqueeze(-1)).squeeze(-1)


Param = torch.Tensor | Callable[[float], torch.Tensor]

_NAMES = ("Q", "K", "V", "query_bias", "key_bias", "value_bias")


class QKV:
    """Holds Q, K, V, optional biases (tensors or callables ``t -> tensor``) and the scale.

    Shapes are checked at construction; callables are evaluated once at t = 0 for that,
    and their outputs are shape-checked at every later evaluation. Biases: queries
    Qx + b_q and keys Ky + b_k with b_q, b_k of shape (..., k); values Vy + b_v with b_v of
    shape (..., d) (the affine layers of real Transformers).
    """

    def __init__(self, Q, K, V, scale=None, *, query_bias=None, key_bias=None, value_bias=None):
        given = (Q, K, V, query_bias, key_bias, value_bias)
        self._params = tuple(
            None if p is None else as_parameter(p, name)
            for p, name in zip(given, _NAMES, strict=True)
        )
        q0 = self._evaluate(self._params[0], "Q", 0.0)
        if q0.ndim < 2:
            raise ValueError(
                f"Q must have shape (..., k, d); received shape {tuple(q0.shape)}. "
                "A single query vector is Q of shape (1, d)."
            )
        self.k, self.dim = q0.shape[-2], q0.shape[-1]
        if self.k == 0 or self.dim == 0:
            raise ValueError(
                f"Q must have shape (..., k, d) with k >= 1 query rows and d >= 1 token "
                f"coordinates; received shape {tuple(q0.shape)}."
            )
        values = self._evaluate_all(0.0)
        self._check_shapes(values)
        #: Broadcast batch shape of the parameters at t = 0 (empty for one parameter set).
        self.batch_shape = torch.broadcast_shapes(
            *(p.shape[:-2] for p in values[:3]),
            *(b.shape[:-1] for b in values[3:] if b is not None),
        )
        self.scale = 1.0 / math.sqrt(self.k) if scale is None else check_positive(scale, "scale")

    @property
    def Q(self):
        return self._params[0]

    @property
    def K(self):
        return self._params[1]

    @property
    def V(self):
        return self._params[2]

    @property
    def has_bias(self) -> bool:
        return any(p is not None for p in self._params[3:])

    _evaluate = staticmethod(evaluate_parameter)

    def _evaluate_all(self, t: float) -> list:
        return [self._evaluate(p, name, t) for p, name in zip(self._params, _NAMES, strict=True)]

    def _check_shapes(self, values) -> None:
        Q, K, V, bq, bk, bv = values
        k, d = self.k, self.dim
        if Q.shape[-2:] != (k, d):
            raise ValueError(
                f"Q changed shape over time: {tuple(Q.shape)} instead of (..., {k}, {d})."
            )
        if K.ndim < 2 or K.shape[-2:] != (k, d):
            raise ValueError(
                f"K must have shape (..., {k}, {d}) like Q {tuple(Q.shape)}; received "
                f"{tuple(K.shape)}."
            )
        if V.ndim < 2 or V.shape[-2:] != (d, d):
            raise ValueError(
                f"V must have shape (..., {d}, {d}) for tokens of dimension {d}; "
                f"received {tuple(V.shape)}."
            )
        for bias, name, size in ((bq, "query_bias", k), (bk, "key_bias", k), (bv, "value_bias", d)):
            if bias is not None and (bias.ndim < 1 or bias.shape[-1] != size):
                raise ValueError(
                    f"{name} must have shape (..., {size}); received {tuple(bias.shape)}."
                )
        batches = [p.shape[:-2] for p in (Q, K, V)] + [
            b.shape[:-1] for b in (bq, bk, bv) if b is not None
        ]
        try:
            torch.broadcast_shapes(*batches)
        except RuntimeError:
            listed = ", ".join(str(tuple(b)) for b in batches)
            raise ValueError(
                f"the batch shapes of the parameters do not broadcast: {listed}."
            ) from None

    @property
    def time_dependent(self) -> bool:
        return any(p is not None and not isinstance(p, torch.Tensor) for p in self._params)

    def _isotropic(self) -> tuple[torch.Tensor | None, bool, torch.Tensor | None]:
        """(c, V is I, v) for constant, bias-free parameters outside autograd: c (..., 1, 1)
        where A = cI, else None; v (..., 1, 1) where V = vI, else None. Recomputed when a
        parameter tensor changes in place (its version counter), so a stale answer is never
        used."""
        Q, K, V = self._params[:3]
        if self.time_dependent or self.has_bias or self.k != self.dim:
            return None, False, None
        if Q.requires_grad or K.requires_grad or V.requires_grad:
            return None, False, None
        key = tuple((id(p), p._version) for p in (Q, K, V))
        if getattr(self, "_isotropic_key", None) != key:
            dtype = torch.promote_types(torch.promote_types(Q.dtype, K.dtype), V.dtype)
            Q, K, V = (p.to(dtype) for p in (Q, K, V))  # parameters may mix dtypes
            eye = torch.eye(self.dim, dtype=dtype, device=V.device)
            # A in float64 (then c in the parameters' dtype): a scale past float32's range
            # is inf in its dtype, and inf·0 = NaN would hide that A = cI
            A = self.scale * (K.transpose(-1, -2) @ Q).to(torch.float64)
            c, v = A[..., :1, :1], V[..., :1, :1]
            # cI compared entrywise, not as c·I: an overflowed c = inf gives inf·0 = NaN there
            isotropic = bool((A == torch.where(eye.bool(), c, 0.0)).all())
            scalar = c.to(dtype) if isotropic else None
            value = v if bool((V == torch.where(eye.bool(), v, 0.0)).all()) else None
            # a batched identity V still carries the batch shape into the velocity: not skipped
            identity = V.ndim == 2 and bool((V == eye).all())
            self._isotropic_key, self._isotropic_value = key, (scalar, identity, value)
        return self._isotropic_value

    def isotropic_interaction(self, like: torch.Tensor) -> torch.Tensor | None:
        """c of shape (..., 1, 1) when the interaction A = scale·KᵀQ is cI (constant, no
        bias, outside autograd; GLPR's A = βI), in ``like``'s dtype and device: the queries
        are then c·x, one product per coordinate instead of a d × d product per token."""
        scalar = self._isotropic()[0]
        return None if scalar is None else scalar.to(dtype=like.dtype, device=like.device)

    def isotropic_value(self, like: torch.Tensor) -> torch.Tensor | None:
        """v of shape (..., 1, 1) when V = vI (conditions as for
        :meth:`isotropic_interaction`), in ``like``'s dtype and device, else None."""
        value = self._isotropic()[2]
        return None if value is None else value.to(dtype=like.dtype, device=like.device)

    @property
    def value_is_identity(self) -> bool:
        """Whether V is the constant, unbatched identity (d, d) (conditions as for
        :meth:`isotropic_interaction`): the values are the points, no product with V."""
        return self._isotropic()[1]

    def at(self, t: float, like: torch.Tensor) -> HeadParams:
        """Resolve at time ``t`` in ``like``'s dtype and device (autograd preserved)."""
        values = self._evaluate_all(t)
        if self.time_dependent:
            self._check_shapes(values)
        Q, K, V, bq, bk, bv = (
            None if v is None else v.to(dtype=like.dtype, device=like.device) for v in values
        )
        return HeadParams(Q, K, V, self.scale, bq, bk, bv)


def _not_a_gradient_flow(field, reason: str) -> NotAGradientFlow:
    return NotAGradientFlow(
        f"{type(field).__name__} attention is not a gradient flow in tpde for these "
        f"parameters: {reason} (MATH.md §5)."
    )


def check_no_bias(field) -> None:
    """Query/key/value biases change the energy; energies are defined without them."""
    if getattr(field.params, "has_bias", False):
        raise _not_a_gradient_flow(
            field,
            "the field has query, key or value biases; E and F are defined for bias-free "
            "attention (Ax scores, values Vy); with biases, the key weight and drift of "
            "tpde.fields.nearest_gradient_field(field) (MATH.md §12)",
        )


def qkv_interaction(field, t: float) -> tuple[torch.Tensor, torch.Tensor, torch.dtype]:
    """(A, V, dtype) of a bias-free, unbatched Q/K/V field at time t, for its gradient
    structure: A and V in float64 on the parameters' device, and the dtype the parameters
    were given in (whose epsilon sets the tolerances of :func:`tpde.metrics.mobility.mobility`).
    """
    check_no_bias(field)
    query = evaluate_parameter(field.params.Q, "Q", t)
    dtype = query.dtype if query.is_floating_point() else torch.float64
    p = field.params.at(t, like=torch.empty((), dtype=torch.float64, device=query.device))
    if p.A.ndim != 2 or p.V.ndim != 2:
        raise _not_a_gradient_flow(
            field, f"batched parameters (A {tuple(p.A.shape)}); take one parameter set"
        )
    return p.A, p.V, dtype


class Weights:
    """Named weights of one feed-forward field, checked to chain.

    Parameters
    ----------
    owner : str
        The field's name, for messages.
    specs : dict name -> tuple of size symbols
        Trailing shape of each weight, e.g. ``{"W1": ("m", "d"), "b1": ("m",)}``; the
        first weight that carries a symbol fixes its size.
    values : dict name -> tensor, array, callable ``t -> tensor`` or None
        None (a bias left out) is allowed for names in ``optional``.
    optional : names that may be None.

    Notes
    -----
    Callables are evaluated at t = 0 to check the shapes, and re-checked at every later
    evaluation (a layer whose shape changes with t is an error, not a broadcast).
    """

    def __init__(self, owner: str, specs: dict, values: dict, optional=()):
        self.owner, self.specs = owner, dict(specs)
        for name in specs:
            if values[name] is None and name not in optional:
                raise ValueError(f"{owner}: {name} is required; received None.")
        self._params = {
            name: None if values[name] is None else as_parameter(values[name], name)
            for name in specs
        }
        self.sizes: dict[str, int] = {}
        self._source: dict[str, tuple[str, tuple]] = {}
        evaluated = self._evaluate_all(0.0)
        self._fix_sizes({k: v for k, v in evaluated.items() if v is not None})
        #: Broadcast batch shape of the weights at t = 0 (empty for one weight set).
        self.batch_shape = self._batch_shape(evaluated)
        #: Each weight's shape at t = 0 (batch dimensions included): kept at every t.
        self._shapes = {name: tuple(v.shape) for name, v in evaluated.items() if v is not None}

    # ---------------------------------------------------------------- checks
    def _fix_sizes(self, weights: dict) -> None:
        """Read each symbol's size from the weights that carry it, by majority: where the
        weights disagree, the size most of them give is the size, and a weight that gives
        another is the one blamed (a wrong Wq is named, not the Wo checked after it); with
        no majority (a tie) every holder is named."""
        held: dict[str, list] = {}
        for name, value in weights.items():
            symbols = self.specs[name]
            if value.ndim < len(symbols) or 0 in value.shape[value.ndim - len(symbols) :]:
                raise ValueError(
                    f"{self.owner}: {name} must have shape (..., {', '.join(symbols)}) with "
                    f"sizes >= 1; received shape {tuple(value.shape)}."
                )
            trailing = value.shape[value.ndim - len(symbols) :]
            for symbol, size in zip(symbols, trailing, strict=True):
                held.setdefault(symbol, []).append((name, size, tuple(value.shape)))
        for symbol, holders in held.items():
            counts = Counter(size for _, size, _ in holders)
            size, votes = counts.most_common(1)[0]
            if len(counts) > 1 and list(counts.values()).count(votes) > 1:
                listed = ", ".join(f"{n} has shape {shape}" for n, _, shape in holders)
                raise ValueError(
                    f"{self.owner}: the weights do not chain: they disagree on {symbol} "
                    f"({listed}) and no size has a majority: one of them is wrong; give "
                    f"{symbol} one size in all of them."
                )
            self.sizes[symbol] = size
            self._source[symbol] = next((n, sh) for n, z, sh in holders if z == size)
        for symbol, holders in held.items():
            for name, size, shape in holders:
                if size != self.sizes[symbol]:
                    symbols = self.specs[name]
                    expected = ", ".join(str(self.sizes[s]) for s in symbols)
                    other, other_shape = self._source[symbol]
                    raise ValueError(
                        f"{self.owner}: the weights do not chain: {name} has shape {shape} "
                        f"but {other} has shape {other_shape}, so {name} must have shape "
                        f"(..., {expected}) = (..., {', '.join(symbols)}) ({symbol} = "
                        f"{self.sizes[symbol]} from {other}, as most weights have it)."
                    )

    def _check_shapes(self, evaluated: dict) -> None:
        for name, value in evaluated.items():
            if value is None:
                continue
            expected = self._shapes[name]
            if tuple(value.shape) != expected:
                raise ValueError(
                    f"{self.owner}: {name} changed shape over time: {tuple(value.shape)} "
                    f"instead of {expected} (its shape at t = 0): a layer's weights keep "
                    "their shape, batch dimensions included, at every depth-time."
                )

    def _batch_shape(self, evaluated: dict) -> torch.Size:
        batches = {
            name: value.shape[: value.ndim - len(self.specs[name])]
            for name, value in evaluated.items()
            if value is not None
        }
        try:
            return torch.broadcast_shapes(*batches.values())
        except RuntimeError:
            listed = ", ".join(f"{name} {tuple(b)}" for name, b in batches.items())
            raise ValueError(
                f"{self.owner}: the batch shapes of the weights do not broadcast: {listed}."
            ) from None

    # ---------------------------------------------------------------- values
    def _evaluate_all(self, t: float) -> dict:
        return {name: evaluate_parameter(p, name, t) for name, p in self._params.items()}

    @property
    def time_dependent(self) -> bool:
        return any(p is not None and not isinstance(p, torch.Tensor) for p in self._params.values())

    def at(self, t: float, like: torch.Tensor) -> tuple:
        """The weights at time ``t`` in ``like``'s dtype and device, in ``specs`` order
        (None for a left-out bias); autograd preserved. Constant weights already in that
        dtype and device are the stored tensors themselves: that tuple is kept for the next
        call (in-place edits of the weights show through it)."""
        kept = self.__dict__.get("_kept")
        if kept is not None and kept[0] == like.dtype and kept[1] == like.device:
            return kept[2]
        evaluated = self._evaluate_all(t)
        if self.time_dependent:
            self._check_shapes(evaluated)
        resolved = tuple(
            None if v is None else v.to(dtype=like.dtype, device=like.device)
            for v in evaluated.values()
        )
        stored = evaluated.values()
        if not self.time_dependent and all(a is b for a, b in zip(resolved, stored, strict=True)):
            self._kept = (like.dtype, like.device, resolved)
        return resolved


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x Wᵀ + b for x (..., n, in), W (..., out, in), b (..., out) or None: nn.Linear's
    product, with batch dimensions of W and b broadcast against x's."""
    if weight.ndim == 2 and (bias is None or bias.ndim == 1):
        return torch.nn.functional.linear(x, weight, bias)
    out = x @ weight.transpose(-1, -2)
    return out if bias is None else out + bias.unsqueeze(-2)
