"""KeOps engine: streaming reductions with symbolic LazyTensors (linear memory).

pykeops is imported lazily, on the first use of the engine: importing it compiles a
small C++ module, and each new formula is compiled with the system g++ (10–30 s) into
KeOps's cache folder (``KEOPS_CACHE_FOLDER``; the project's Makefile points it to an
ignored ``build/keops`` folder of the checkout).

On a machine without CUDA, keopscore prints "[KeOps] Warning : CUDA libraries not found …"
to stdout when it is first imported; :func:`quiet_keops_import` keeps that banner out of
tpde's runs, tests and examples (tpde's own fallback warnings are Python warnings and are
not affected).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

import torch

from tpde._engines.torch_engines import augment_with_bias


class KeOpsUnavailable(RuntimeError):
    """KeOps cannot be imported or cannot compile a formula on this machine."""


@contextlib.contextmanager
def quiet_keops_import():
    """Import KeOps inside this block without its import-time banner.

    keopscore reads its verbosity once, from ``KEOPS_VERBOSE``, when it is first imported,
    and then prints the CUDA probe's result to stdout ("CUDA libraries not found …" on every
    CPU-only machine). The block sets ``KEOPS_VERBOSE=0`` for that first import only and
    restores the environment after it. A value the user set (``KEOPS_VERBOSE=1`` to see
    KeOps's messages) is left alone, and so is a KeOps already imported.
    """
    if "keopscore" in sys.modules or "KEOPS_VERBOSE" in os.environ:
        yield
        return
    os.environ["KEOPS_VERBOSE"] = "0"
    try:
        yield
    finally:
        os.environ.pop("KEOPS_VERBOSE", None)


def import_pykeops():
    """``pykeops``, imported quietly (:func:`quiet_keops_import`), its verbosity off."""
    with quiet_keops_import():
        import pykeops

    pykeops.set_verbose(False)
    return pykeops


@functools.cache
def keops_status() -> tuple[bool, str]:
    """Whether KeOps works here, and if not, why (cached for the process).

    Imports pykeops and compiles one tiny reduction, so the answer is a real test.
    """
    try:
        import_pykeops()
        from pykeops.torch import LazyTensor
    except Exception as err:  # any import failure is a reason to report, not to hide
        return False, f"pykeops could not be imported ({type(err).__name__}: {err})"
    try:
        x = torch.zeros(2, 1, dtype=torch.float64, device="cpu")  # the compile test
        (LazyTensor(x[:, None, :]) - LazyTensor(x[None, :, :])).sum(dim=1)
    except Exception as err:
        return False, f"pykeops could not compile a test formula ({type(err).__name__}: {err})"
    return True, "ok"


def require_keops():
    """Return pykeops' LazyTensor or raise :class:`KeOpsUnavailable` naming the cause."""
    ok, reason = keops_status()
    if not ok:
        raise KeOpsUnavailable(
            f"engine='keops' was requested but KeOps is not usable: {reason}. KeOps needs "
            "g++ and the Python headers at run time; install them or pick engine='sdpa', "
            "'chunked' or 'auto'."
        )
    from pykeops.torch import LazyTensor

    return LazyTensor


def softmax_average_keops(
    q, k, v, key_bias=None, query_positions=None, key_positions=None, window=None
):
    """Σ_j softmax_j(q_i·k_j + b_j) v_j as one KeOps ``sumsoftmaxweight`` reduction.

    With positions, keys with s_j > s_i score −10³⁰ for query i (KeOps ``ifelse``; the
    comparison is s_i − s_j ≥ 0, ties included); with a ``window`` w, so do the keys with
    s_i − s_j − w ≥ 0.
    """
    LazyTensor = require_keops()
    q, k = augment_with_bias(q, k, key_bias)
    q_i = LazyTensor(q.unsqueeze(-2).contiguous())
    k_j = LazyTensor(k.unsqueeze(-3).contiguous())
    v_j = LazyTensor(v.unsqueeze(-3).contiguous())
    scores = q_i | k_j
    if query_positions is not None:
        batch = q.shape[:-2]
        s_i = query_positions.to(q.dtype).expand(*batch, -1).unsqueeze(-1).unsqueeze(-1)
        s_j = key_positions.to(q.dtype).expand(*batch, -1).unsqueeze(-1).unsqueeze(-3)
        gap = LazyTensor(s_i.contiguous()) - LazyTensor(s_j.contiguous())
        scores = gap.ifelse(scores, -1e30)
        if window is not None:
            scores = (gap - float(window)).ifelse(-1e30, scores)
    return scores.sumsoftmaxweight(v_j, dim=q.ndim - 1)


def _keops_kernel(scores, kernel: str):
    """φ(scores) as a KeOps formula; σ(s) written overflow-free as e^{−relu(−s)}/(1 + e^{−|s|})."""
    if kernel == "sigmoid":
        return (-(-scores).relu()).exp() / (1 + (-scores.abs()).exp())
    if kernel == "exp":
        return scores.exp()
    return scores  # "linear": φ = identity


def kernel_sum_keops(q, k, v, key_bias=None, kernel: str = "sigmoid"):
    """Σ_j φ(q_i·k_j + b_j) v_j as one KeOps ``sum`` reduction (no normalisation)."""
    LazyTensor = require_keops()
    q, k = augment_with_bias(q, k, key_bias)
    q_i = LazyTensor(q.unsqueeze(-2).contiguous())
    k_j = LazyTensor(k.unsqueeze(-3).contiguous())
    v_j = LazyTensor(v.unsqueeze(-3).contiguous())
    return (_keops_kernel(q_i | k_j, kernel) * v_j).sum(dim=q.ndim - 1)


def logsumexp_keops(q, k, key_bias=None):
    """log Σ_j exp(q_i·k_j + b_j) as one KeOps ``logsumexp`` reduction (linear memory)."""
    LazyTensor = require_keops()
    q, k = augment_with_bias(q, k, key_bias)
    q_i = LazyTensor(q.unsqueeze(-2).contiguous())
    k_j = LazyTensor(k.unsqueeze(-3).contiguous())
    return (q_i | k_j).logsumexp(dim=q.ndim - 1).squeeze(-1)
