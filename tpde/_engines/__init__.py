"""Compute engines for pairwise reductions: one table, one formula per engine.

Engines (the word *engine* is used for nothing else in tpde):

- ``"dense"``: the full (n, m) score matrix; O(n·m) memory; the reference.
- ``"chunked"``: row blocks of the dense computation under a 64 MB budget, checkpointed
  under autograd; bounded memory on any device.
- ``"sdpa"``: ``torch.nn.functional.scaled_dot_product_attention`` (fused flash kernel,
  O(n) memory). Expresses softmax averages (causal ones too) and, on the CPU, log-sum-exp
  reductions (through the internal flash op that also returns the log-normaliser).
- ``"keops"``: pykeops LazyTensor streaming reductions (O(n) memory, compiled formulas).
- ``"tiled"``: cache-sized tiles of in-place torch operations, threads as one parallel
  region, a tiled backward (:mod:`tpde._engines.tiled`); the fused kernel that the CPU lacks
  for unnormalised kernel sums, so kernel sums only.
- ``"spectral"``: the isotropic kernel e^{β⟨x, y⟩} of tokens on the circle S¹ as a Fourier
  series (:mod:`tpde._engines.spectral`), exact to rounding in O(n·K); not a general q, k, v
  reduction: the fields whose sums it expresses (:class:`~tpde.fields.Softmax`,
  :class:`~tpde.fields.Exponential` with A = βI, V = vI, d = 2, at the tokens themselves)
  call it directly.
- ``"harmonics"``: the same kernel for tokens on the sphere S² (d = 3) in real spherical
  harmonics (:mod:`tpde._engines.harmonics`), exact to rounding in O(n·L²); called, like
  "spectral", by the fields it applies to.
- ``"auto"``: the rule of :func:`pick_engine`, from measurements in ``benchmarks/fields.py``
  (and :func:`~tpde._engines.spectral.pick_spectral`, ``benchmarks/spectral.py``;
  :func:`~tpde._engines.harmonics.pick_harmonics`, ``benchmarks/sphere_harmonics.py``).

Primitives: :func:`softmax_average` (every engine; its weights as a matrix:
:func:`softmax_weights`, the dense engine's) and :func:`kernel_sum`, the
unnormalised sum Σ_j φ(q_i·k_j + b_j) v_j of sigmoid, linear and exponential (USA) attention (dense,
chunked, tiled, keops; its "auto" rule is :func:`pick_kernel_sum_engine`), and :func:`logsumexp`,
log Σ_j exp(q_i·k_j + b_j), of Sinkhorn attention (every engine, "sdpa" on the CPU only;
"auto": :func:`pick_logsumexp_engine`).
"""

from __future__ import annotations

import functools
import math
import warnings

import torch

from tpde._engines.keops import (
    KeOpsUnavailable,
    keops_status,
    kernel_sum_keops,
    logsumexp_keops,
    softmax_average_keops,
)
from tpde._engines.tiled import kernel_sum_tiled
from tpde._engines.torch_engines import (
    POINTWISE_KERNELS,
    flash_logsumexp_available,
    kernel_sum_chunked,
    kernel_sum_dense,
    logsumexp_chunked,
    logsumexp_dense,
    logsumexp_sdpa,
    softmax_average_chunked,
    softmax_average_dense,
    softmax_average_sdpa,
    softmax_weights_dense,
)
from tpde._memo import TensorMemo
from tpde._validation import check_choice

__all__ = [
    "ENGINES",
    "POINTWISE_KERNELS",
    "KeOpsUnavailable",
    "check_engine",
    "kernel_sum",
    "logsumexp",
    "pick_engine",
    "pick_kernel_sum_engine",
    "pick_logsumexp_engine",
    "softmax_average",
    "softmax_weights",
]

ENGINES = ("auto", "dense", "chunked", "sdpa", "keops", "tiled", "spectral", "harmonics")

# Below this many score entries the dense matrix is cheapest and its memory negligible.
DENSE_LIMIT = 2**16

_SOFTMAX_AVERAGE = {
    "dense": softmax_average_dense,
    "chunked": softmax_average_chunked,
    "sdpa": softmax_average_sdpa,
    "keops": softmax_average_keops,
}

# Unnormalised kernel sums (sigmoid, linear, exp): SDPA always normalises, so it is absent.
_KERNEL_SUM = {
    "dense": kernel_sum_dense,
    "chunked": kernel_sum_chunked,
    "tiled": kernel_sum_tiled,
    "keops": kernel_sum_keops,
}


def _engine_for(table: dict, engine: str, what: str):
    """The implementation of ``what`` on ``engine``; a ValueError names the engines with one."""
    if engine == "spectral":
        raise ValueError(
            f"engine 'spectral' does not compute general {what}: it sums the isotropic kernel "
            "e^{β⟨x, y⟩} of tokens on the unit circle, for Softmax and Exponential attention "
            "with A = βI (β > 0), V = vI and d = 2, at the tokens themselves. Use "
            f"engine='auto' or one of {', '.join(repr(e) for e in table)}."
        )
    if engine == "harmonics":
        raise ValueError(
            f"engine 'harmonics' does not compute general {what}: it sums the isotropic kernel "
            "e^{β⟨x, y⟩} of tokens on the unit sphere S², for Softmax and Exponential attention "
            "with A = βI (β > 0), V = vI and d = 3, at the tokens themselves. Use "
            f"engine='auto' or one of {', '.join(repr(e) for e in table)}."
        )
    if engine not in table:
        raise ValueError(
            f"engine '{engine}' does not compute {what}; use engine='auto' or one of "
            f"{', '.join(repr(e) for e in table)}."
        )
    return table[engine]


def check_engine(engine: str) -> str:
    """Validate an engine name at the public boundary."""
    if not isinstance(engine, str):
        raise TypeError(f"engine must be a string; received {type(engine).__name__}.")
    return check_choice(engine, "engine", ENGINES)


@functools.cache
def _warn_keops_fallback(reason: str, fallback: str) -> None:
    warnings.warn(
        f"engine='auto' would use KeOps here, but KeOps is not usable ({reason}); "
        f"falling back to '{fallback}'. This warning is shown once.",
        RuntimeWarning,
        stacklevel=4,
    )


def pick_engine(n: int, m: int, device: torch.device, dtype: torch.dtype, batch: int = 1) -> str:
    """The ``"auto"`` rule for softmax averages with n queries and m keys (``batch`` clouds).

    Measured on a 2-core CPU (benchmarks/fields.py): the fused SDPA flash kernel beats the
    dense matrix from n·m ≈ 10⁵ on (5× at n = 10⁴, d = 2) and needs O(n) memory; KeOps on
    the CPU is 5–10× slower than SDPA. Hence: dense while n·m ≤ 2¹⁶, SDPA beyond. On the
    CPU the rule counts the score entries of the whole batch, batch·n·m: a batch of small
    clouds (a phase diagram: 90 × 256 clouds of 32 tokens, d = 2, float64) costs 2.2–2.3×
    less on SDPA than as one dense (batch, n, m) tensor, and 2.3–2.6× less than in row
    blocks (one core, two runs; benchmarks/glpr.py times the whole diagram). On CUDA,
    SDPA's fused kernels do not take float64, so float64 goes to KeOps (or to the chunked
    engine, with a one-time warning, when KeOps cannot compile); a batch of small clouds
    stays dense there. A causal mask does not move the limit: the dense engine adds
    self-attention's memoised 0/−inf mask in one pass on the CPU (a Transformer of width 16,
    4 heads × 128² scores, float32: 111 µs against SDPA's 106; filled in by ``masked_fill``
    it took 146), so the rule's results, and every test's, are unchanged (issue 34).
    """
    entries = n * m * (batch if device.type == "cpu" else 1)
    if entries <= DENSE_LIMIT:
        return "dense"
    if device.type == "cuda" and dtype == torch.float64:
        ok, reason = keops_status()
        if ok:
            return "keops"
        _warn_keops_fallback(reason, "chunked")
        return "chunked"
    return "sdpa"


def _broadcast_batch(q, k, v, key_bias):
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]]
    if key_bias is not None:
        shapes.append(key_bias.shape[:-1])
    if all(shape == shapes[0] for shape in shapes):  # torch.broadcast_shapes costs ~0.5 ms
        return q, k, v, key_bias
    batch = torch.broadcast_shapes(*shapes)
    q = q.expand(*batch, *q.shape[-2:])
    k = k.expand(*batch, *k.shape[-2:])
    v = v.expand(*batch, *v.shape[-2:])
    if key_bias is not None:
        key_bias = key_bias.expand(*batch, key_bias.shape[-1])
    return q, k, v, key_bias


def _drop_constant_bias(key_bias):
    """None for a key bias (m,) equal on every key and outside autograd, else the bias.

    A bias shared by all keys cancels in the softmax: the log-weights of uniformly weighted
    particles, log(1/n), are such a bias. Dropping it saves the extra coordinate that
    carries it on SDPA (width d + 1 → d: 1.15–1.25× faster for 90 × 256 clouds of 32
    tokens, d = 2, float64) and an addition on the dense engines. A bias that requires grad
    is kept: its gradient is not zero entry by entry.
    """
    if key_bias is None or key_bias.ndim != 1 or key_bias.requires_grad:
        return key_bias
    return None if _CONSTANT(key_bias) else key_bias


def _constant(vector: torch.Tensor) -> bool:
    return bool((vector == vector[:1]).all())


#: Whether a key bias is constant, remembered for the last bias (a flow's log-weights, one
#: tensor for the whole run: :mod:`tpde._memo`).
_CONSTANT = TensorMemo(_constant, "key bias")


def softmax_average(
    q,
    k,
    v,
    key_bias=None,
    engine: str = "auto",
    *,
    query_positions=None,
    key_positions=None,
    window: float | None = None,
) -> torch.Tensor:
    """Key-biased softmax average on the chosen engine.

    out_i = Σ_j exp(q_i·k_j + b_j) v_j / Σ_j exp(q_i·k_j + b_j)

    Parameters
    ----------
    q : (..., n, e) queries;  k : (..., m, e) keys;  v : (..., m, f) values;
    key_bias : (..., m) or None, e.g. log-weights of the keys.
    engine : one of :data:`ENGINES` except "tiled" (kernel sums only).
    query_positions, key_positions : (n,) and (m,), optional, both or neither
        Causal mask (masked attention): the sums run over the keys with s_j ≤ s_i, ties
        included. Every query must see at least one key.
    window : float, optional (with positions)
        Sliding window w > 0: the sums run over the keys with 0 ≤ s_i − s_j < w only
        (a window of w = 4 on integer positions: the query and its 3 predecessors).

    Returns
    -------
    (..., n, f) tensor, differentiable in all inputs on every engine.
    """
    key_bias = _drop_constant_bias(key_bias)
    q, k, v, key_bias = _broadcast_batch(q, k, v, key_bias)
    if engine == "auto":
        batch = math.prod(q.shape[:-2])
        engine = pick_engine(q.shape[-2], k.shape[-2], q.device, q.dtype, batch)
    average = _engine_for(_SOFTMAX_AVERAGE, engine, "softmax averages")
    return average(q, k, v, key_bias, *_mask(query_positions, key_positions, window))


def softmax_weights(
    q, k, key_bias=None, *, query_positions=None, key_positions=None, window=None, softcap=None
) -> torch.Tensor:
    """The weights P_ij = exp(q_i·k_j + b_j)/Σ_l exp(q_i·k_l + b_l) of :func:`softmax_average`
    as a (..., n, m) matrix (the dense engine's; rows sum to 1, hidden keys weigh 0).

    Arguments and checks as :func:`softmax_average`; softmax_average(q, k, v, ...) equals
    softmax_weights(q, k, ...) @ v on every engine, to rounding. ``softcap`` c: the scores
    c·tanh(q_i·k_j/c) + b_j (only this dense matrix has it).
    """
    key_bias = _drop_constant_bias(key_bias)
    mask = _mask(query_positions, key_positions, window)
    return softmax_weights_dense(q, k, key_bias, *mask, softcap=softcap)


def _mask(query_positions, key_positions, window) -> tuple:
    """The mask arguments of an engine, checked: () without positions, (query_positions,
    key_positions) for a causal mask, and the window after them."""
    if query_positions is None and key_positions is None:
        if window is not None:
            raise ValueError("a sliding window needs query_positions and key_positions.")
        return ()
    if query_positions is None or key_positions is None:
        raise ValueError("a causal mask needs both query_positions and key_positions.")
    if window is not None:
        if not window > 0:
            raise ValueError(f"window must be > 0; received {window!r}.")
        if query_positions is not key_positions:  # self-attention: each query sees itself
            _check_window_sees_keys(query_positions, key_positions, window)
        return query_positions, key_positions, window
    if query_positions is not key_positions and bool(query_positions.min() < key_positions.min()):
        raise ValueError(
            f"a query at position {float(query_positions.min()):.4g} sees no key: the "
            f"earliest key is at {float(key_positions.min()):.4g}. Add a key (a sink) at a "
            "position ≤ every query's."
        )
    return query_positions, key_positions


def _check_window_sees_keys(query_positions, key_positions, window: float) -> None:
    """Raise unless every query sees a key s_j with 0 ≤ s_i − s_j < window (O((n + m) log m))."""
    keys = torch.sort(key_positions).values
    seen = torch.searchsorted(keys, query_positions, right=True)
    too_old = torch.searchsorted(keys, query_positions - window, right=True)
    blind = seen <= too_old
    if bool(blind.any()):
        where = float(query_positions[blind][0])
        raise ValueError(
            f"a query at position {where:.4g} sees no key in its window ({where - window:.4g}, "
            f"{where:.4g}]: widen the window or add a key in it."
        )


def pick_kernel_sum_engine(n: int, m: int, device: torch.device, dtype: torch.dtype) -> str:
    """The ``"auto"`` rule for unnormalised kernel sums with n queries and m keys.

    Dense while n·m ≤ 2¹⁶ (as for softmax). Beyond, on the CPU, the tiled engine: on one
    core it takes 1.25× the time of softmax on SDPA's flash kernel at d = 16 (n = 10³–10⁵),
    1.0× at d = 64 and in float64, and 3–6× less than the chunked engine
    (benchmarks/fields.py). On CUDA, KeOps when it compiles (linear memory, fused), else the
    chunked engine: the tiled engine's Python loop over small tiles would launch millions
    of GPU kernels.
    """
    if n * m <= DENSE_LIMIT:
        return "dense"
    if device.type == "cpu":
        return "tiled"
    if device.type == "cuda":
        ok, reason = keops_status()
        if ok:
            return "keops"
        _warn_keops_fallback(reason, "chunked")
    return "chunked"


def kernel_sum(q, k, v, key_bias=None, kernel: str = "sigmoid", engine: str = "auto"):
    """Unnormalised kernel sum on the chosen engine.

    out_i = Σ_j φ(q_i·k_j + b_j) v_j,   φ = σ ("sigmoid"), exp ("exp": the USA model's
    kernel) or the identity ("linear").

    Parameters
    ----------
    q : (..., n, e) queries;  k : (..., m, e) keys;  v : (..., m, f) values (fold key
    weights into v); key_bias : (..., m) or None, added inside φ.
    kernel : one of :data:`POINTWISE_KERNELS`.
    engine : "auto", "dense", "chunked", "tiled" or "keops". "sdpa" raises: it only
        expresses normalised (softmax) averages.

    Returns
    -------
    (..., n, f) tensor, differentiable in all inputs on every engine (first-order on
    "tiled"; "dense" and "chunked" to any order).
    """
    check_choice(kernel, "kernel", tuple(POINTWISE_KERNELS))
    if engine == "sdpa":
        raise ValueError(
            f"engine 'sdpa' only computes softmax-normalised averages and cannot express the "
            f"unnormalised {kernel} kernel sum; use engine='auto', 'dense', 'chunked', "
            "'tiled' or 'keops'."
        )
    q, k, v, key_bias = _broadcast_batch(q, k, v, key_bias)
    if engine == "auto":
        engine = pick_kernel_sum_engine(q.shape[-2], k.shape[-2], q.device, q.dtype)
    return _engine_for(_KERNEL_SUM, engine, "kernel sums")(q, k, v, key_bias, kernel)


_LOGSUMEXP = {
    "dense": logsumexp_dense,
    "chunked": logsumexp_chunked,
    "sdpa": logsumexp_sdpa,
    "keops": logsumexp_keops,
}


def pick_logsumexp_engine(n: int, m: int, device: torch.device, dtype: torch.dtype) -> str:
    """The ``"auto"`` rule for log-sum-exp reductions with n queries and m keys.

    Dense while n·m ≤ 2¹⁶. Beyond, on the CPU, the fused flash kernel ("sdpa", 2–4× faster
    than row blocks at n = 10⁴–2·10⁴ on 2 cores, benchmarks/fields.py) when this torch has
    it, else "chunked"; on CUDA, KeOps when it compiles, else "chunked".
    """
    if n * m <= DENSE_LIMIT:
        return "dense"
    if flash_logsumexp_available(device):
        return "sdpa"
    if device.type == "cuda":
        ok, reason = keops_status()
        if ok:
            return "keops"
        _warn_keops_fallback(reason, "chunked")
    return "chunked"


def logsumexp(q, k, key_bias=None, engine: str = "auto") -> torch.Tensor:
    """Key-biased log-sum-exp reduction on the chosen engine.

    out_i = log Σ_j exp(q_i·k_j + b_j)

    The reduction of log-domain Sinkhorn iterations (:class:`tpde.fields.Sinkhorn`).

    Parameters
    ----------
    q : (..., n, e) queries;  k : (..., m, e) keys;  key_bias : (..., m) or None.
    engine : one of :data:`ENGINES` except "tiled" (kernel sums only); "sdpa" is torch's
        CPU flash kernel (CPU only, first-order gradients).

    Returns
    -------
    (..., n) tensor, differentiable in all inputs on every engine.
    """
    q, k, _, key_bias = _broadcast_batch(q, k, k, key_bias)  # no values: k stands in
    if engine == "auto":
        engine = pick_logsumexp_engine(q.shape[-2], k.shape[-2], q.device, q.dtype)
    return _engine_for(_LOGSUMEXP, engine, "log-sum-exp reductions")(q, k, key_bias)
