"""What the feed-forward fields share: named weights that must chain, and the field base.

A feed-forward field (MLP, SwiGLU; MATH.md §8) moves each token by a function of the
token alone, F(x): no interaction, so μ is ignored. Its weights are constant tensors or
callables ``t -> tensor`` (one layer per depth-time, as attention's parameters), with
symbolic trailing shapes (W₁: (m, d), W₂: (d, m), …) that must chain; leading batch
dimensions broadcast against batched points.
"""

from __future__ import annotations

from collections import Counter

import torch

from tpde._validation import as_parameter
from tpde.attention._params import evaluate_parameter
from tpde.attention.base import Field
from tpde.measures import Measure


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
        (None for a left-out bias); autograd preserved."""
        evaluated = self._evaluate_all(t)
        if self.time_dependent:
            self._check_shapes(evaluated)
        return tuple(
            None if v is None else v.to(dtype=like.dtype, device=like.device)
            for v in evaluated.values()
        )


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x Wᵀ + b for x (..., n, in), W (..., out, in), b (..., out) or None: nn.Linear's
    product, with batch dimensions of W and b broadcast against x's."""
    if weight.ndim == 2 and (bias is None or bias.ndim == 1):
        return torch.nn.functional.linear(x, weight, bias)
    out = x @ weight.transpose(-1, -2)
    return out if bias is None else out + bias.unsqueeze(-2)


class FeedForward(Field):
    """Base of the per-token fields F(x): velocity F at every point, μ ignored.

    Subclasses set ``params`` (a :class:`Weights` whose sizes include ``"d"``) and ``dim``,
    and implement :meth:`feed_forward`. There is no Gaussian closure: the pushforward of a
    Gaussian by a nonlinear F is not Gaussian (MATH.md §8), so the base class refuses
    Gaussians (:class:`~tpde.attention.GaussianNotPreserved`).
    """

    params: Weights
    overflow_source = "the hidden units (the first layer's products W x)"

    def feed_forward(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """F(x) for x (..., n, d)."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement feed_forward(t, x), the map F(x) every "
            "feed-forward field defines (docs/EXTENDING.md, 'A feed-forward field')."
        )

    def particle_velocity(self, t, mu, x, engine: str, info=None) -> torch.Tensor:
        """F(x): μ, the engine and ``info`` play no part (no interaction)."""
        return self.feed_forward(t, x)

    def gaussian_refusal(self) -> str:
        """Why a Gaussian is refused, for the base class's GaussianNotPreserved."""
        return (
            f"{type(self).__name__} is a nonlinear per-token field: the pushforward of a "
            "Gaussian by it is not Gaussian, so there is no closed moment ODE. Integrate "
            "particles instead (Empirical.from_gaussian(g, n))."
        )

    def check_measure(self, mu) -> None:
        """Raise unless ``mu`` is a tpde measure on R^d (d from the weights)."""
        if isinstance(mu, Measure) and mu.dim != self.dim:
            name, shape = self.params._source["d"]
            raise ValueError(
                f"dimension mismatch: the measure lives in d = {mu.dim} but the "
                f"{type(self).__name__} acts on d = {self.dim} ({name} has shape {shape})."
            )
        super().check_measure(mu)
