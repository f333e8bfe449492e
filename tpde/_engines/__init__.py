"""Compute engines for pairwise reductions: one table, one formula per engine.

Engines (the word *engine* is used for nothing else in tpde):

- ``"dense"``: the full (n, m) score matrix; O(n·m) memory; the reference.
- ``"chunked"``: row blocks of the dense computation under a 64 MB budget, checkpointed
  under autograd; bounded memory on any device.
- ``"sdpa"``: ``torch.nn.functional.scaled_dot_product_attention`` (fused flash kernel,
  O(n) memory). Only expresses softmax averages.
- ``"keops"``: pykeops LazyTensor streaming reductions (O(n) memory, compiled formulas).
- ``"auto"``: the rule of :func:`pick_engine`, from measurements in ``benchmarks/fields.py``.
"""

from __future__ import annotations

import functools
import warnings

import torch

from tpde._engines.keops import KeOpsUnavailable, keops_status, softmax_average_keops
from tpde._engines.torch_engines import (
    softmax_average_chunked,
    softmax_average_dense,
    softmax_average_sdpa,
)
from tpde._validation import check_choice

__all__ = ["ENGINES", "KeOpsUnavailable", "check_engine", "pick_engine", "softmax_average"]

ENGINES = ("auto", "dense", "chunked", "sdpa", "keops")

# Below this many score entries the dense matrix is cheapest and its memory negligible.
DENSE_LIMIT = 2**16

_SOFTMAX_AVERAGE = {
    "dense": softmax_average_dense,
    "chunked": softmax_average_chunked,
    "sdpa": softmax_average_sdpa,
    "keops": softmax_average_keops,
}


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


def pick_engine(n: int, m: int, device: torch.device, dtype: torch.dtype) -> str:
    """The ``"auto"`` rule for softmax averages with n queries and m keys.

    Measured on a 2-core CPU (benchmarks/fields.py): the fused SDPA flash kernel beats the
    dense matrix from n·m ≈ 10⁵ on (5× at n = 10⁴, d = 2) and needs O(n) memory; KeOps on
    the CPU is 5–10× slower than SDPA. Hence: dense while n·m ≤ 2¹⁶, SDPA beyond. On CUDA,
    SDPA's fused kernels do not take float64, so float64 goes to KeOps (or to the chunked
    engine, with a one-time warning, when KeOps cannot compile).
    """
    if n * m <= DENSE_LIMIT:
        return "dense"
    if device.type == "cuda" and dtype == torch.float64:
        ok, reason = keops_status()
        if ok:
            return "keops"
        _warn_keops_fallback(reason, "chunked")
        return "chunked"
    return "sdpa"


def _broadcast_batch(q, k, v, key_bias):
    batch = torch.broadcast_shapes(
        q.shape[:-2], k.shape[:-2], v.shape[:-2], () if key_bias is None else key_bias.shape[:-1]
    )
    q = q.expand(*batch, *q.shape[-2:])
    k = k.expand(*batch, *k.shape[-2:])
    v = v.expand(*batch, *v.shape[-2:])
    if key_bias is not None:
        key_bias = key_bias.expand(*batch, key_bias.shape[-1])
    return q, k, v, key_bias


def softmax_average(q, k, v, key_bias=None, engine: str = "auto") -> torch.Tensor:
    """Key-biased softmax average on the chosen engine.

    out_i = Σ_j exp(q_i·k_j + b_j) v_j / Σ_j exp(q_i·k_j + b_j)

    Parameters
    ----------
    q : (..., n, e) queries;  k : (..., m, e) keys;  v : (..., m, f) values;
    key_bias : (..., m) or None, e.g. log-weights of the keys.
    engine : one of :data:`ENGINES`.

    Returns
    -------
    (..., n, f) tensor, differentiable in all inputs on every engine.
    """
    q, k, v, key_bias = _broadcast_batch(q, k, v, key_bias)
    if engine == "auto":
        engine = pick_engine(q.shape[-2], k.shape[-2], q.device, q.dtype)
    return _SOFTMAX_AVERAGE[engine](q, k, v, key_bias)
