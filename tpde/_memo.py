"""One-entry memos of facts about the tensors a flow hands to its fields at every call.

A flow's measure keeps its weights and positions for the whole run (``with_points``
shares them), yet each attention call re-derives the same facts from them: whether every
weight is positive, the log-weights, whether the positions increase. Each such fact costs
a reduction and a host read; a Transformer's forward asks it once per layer and sublayer.
:class:`TensorMemo` remembers the answer for the last tensor asked, by identity and
version counter (an in-place edit bumps it, so an edited tensor is read again, as the
RoPE tables of :mod:`tpde.fields.attention.positions` are; so is a remembered tensor result
a caller edited), and never for a tensor that
requires grad (a remembered result would carry a stale graph, or none).
"""

from __future__ import annotations

import threading

import torch

__all__ = ["TensorMemo"]


class TensorMemo:
    """``compute(tensor)``, remembered for the last tensor asked (module notes).

    Parameters
    ----------
    compute : callable
        A function of one tensor whose result depends on the tensor's values only.

    Notes
    -----
    The memo holds a reference to the last tensor (so its identity cannot be reused by
    another tensor while remembered): one vector of weights or positions. A tensor that
    requires grad, an inference tensor and any tensor in inference mode (where results have
    no version counter) are computed afresh at every call.
    """

    def __init__(self, compute):
        self.compute = compute
        self._last = threading.local()  # threads do not share entries

    def __call__(self, tensor: torch.Tensor):
        if tensor.requires_grad or torch.is_inference_mode_enabled() or tensor.is_inference():
            return self.compute(tensor)  # (inference tensors have no version counter)
        last = getattr(self._last, "entry", None)
        if last is not None and last[0] is tensor and last[1] == tensor._version:
            if _intact(last):
                return last[2]
        value = self.compute(tensor)
        self._last.entry = (tensor, tensor._version, value, _version(value))
        return value


def _version(value):
    """A tensor result's version counter (None for other results)."""
    return value._version if isinstance(value, torch.Tensor) else None


def _intact(entry) -> bool:
    """Whether a remembered tensor result was not edited in place since (a caller that
    received it may have)."""
    return entry[3] is None or entry[2]._version == entry[3]
