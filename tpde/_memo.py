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

A forward pass builds its measure afresh (new weights, new positions: new tensors of the
same values as the last pass's), so identity alone would recompute every fact once per
pass: the log-weights, the causal masks and the RoPE tables, about 20 dispatched
operations of a tiny model's forward. :func:`canonical` maps a new tensor to an earlier
one of the same bits (one comparison: ``torch.equal`` of the bit patterns, so −0.0 and
0.0, or two NaNs of other payloads, are different tensors), and the memos key on that
earlier tensor: one comparison per new tensor instead of every fact derived from it. It
holds at most :data:`CANONICAL_POOL` tensors of at most :data:`CANONICAL_ENTRIES` entries
(4 MB, and as many aliases: 8 MiB per thread at most), and like the memos it trusts
version counters: an edit that bypasses them (``.data``, a NumPy view) is not seen. A dual
tensor of forward-mode AD is never mapped (its tangent would be lost).
"""

from __future__ import annotations

import threading

import torch
from torch.autograd import forward_ad

__all__ = ["TensorMemo", "canonical"]

#: Tensors with more entries than this are never compared for :func:`canonical` (facts are
#: memoised about vectors of weights and positions; a large tensor is its own key).
CANONICAL_ENTRIES = 2**16

#: How many earlier tensors (one per kind, shape, dtype and device) :func:`canonical` holds.
CANONICAL_POOL = 8

#: Integer dtypes of the floating dtypes' sizes: a float tensor's bits as integers.
_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


class TensorMemo:
    """``compute(tensor)``, remembered for the last tensor asked (module notes).

    Parameters
    ----------
    compute : callable
        A function of one tensor whose result depends on the tensor's values only.
    kind : str
        What the tensors are ("weights", "positions"): :func:`canonical` compares a new
        tensor with an earlier one of this kind (a forward's weights and positions have
        one shape; comparing either with the other would be a wasted read).

    Notes
    -----
    The memo holds a reference to the last tensor (so its identity cannot be reused by
    another tensor while remembered): one vector of weights or positions. A tensor that
    requires grad, an inference tensor and any tensor in inference mode (where results have
    no version counter) are computed afresh at every call.
    """

    def __init__(self, compute, kind: str = ""):
        self.compute, self.kind = compute, kind
        self._last = threading.local()  # threads do not share entries

    def __call__(self, tensor: torch.Tensor):
        if tensor.requires_grad or torch.is_inference_mode_enabled() or tensor.is_inference():
            return self.compute(tensor)  # (inference tensors have no version counter)
        last = getattr(self._last, "entry", None)
        if last is not None and last[4] is tensor and last[5] == tensor._version:
            if last[0]._version == last[1] and (last[3] is None or last[2]._version == last[3]):
                return last[2]  # the tensor asked last time, all intact (_intact)
        asked, tensor = tensor, canonical(tensor, self.kind)
        if last is not None and last[0] is tensor and last[1] == tensor._version:
            if _intact(last):
                self._last.entry = (*last[:4], asked, asked._version)
                return last[2]
        value = self.compute(tensor)
        self._last.entry = (tensor, tensor._version, value, _version(value), asked, asked._version)
        return value


def _version(value):
    """A tensor result's version counter (None for other results)."""
    return value._version if isinstance(value, torch.Tensor) else None


def _intact(entry) -> bool:
    """Whether a remembered tensor result was not edited in place since (a caller that
    received it may have)."""
    return entry[3] is None or entry[2]._version == entry[3]


class _Canon(threading.local):
    """Per thread: the earlier tensors by (shape, dtype, device) and the last aliases."""

    def __init__(self):
        self.pool: dict = {}  # (kind, shape, dtype, device) -> (tensor, version)
        self.aliases: list = []  # (tensor, version, earlier, earlier's version), newest last


_CANON = _Canon()


def canonical(tensor: torch.Tensor, kind: str = "") -> torch.Tensor:
    """An earlier tensor with ``tensor``'s shape, dtype, device and bits, else ``tensor``.

    The earlier tensor is the last of its ``kind`` (a name the caller gives: "positions"),
    shape, dtype and device that this thread asked about and that was not found equal to
    an earlier one (of the last :data:`CANONICAL_POOL` such keys), still holding the bits it had
    when it was asked. A tensor stays mapped to it while neither is edited in place (their
    version counters); edited, it is compared again. Only contiguous real tensors of at
    most :data:`CANONICAL_ENTRIES` entries outside autograd and inference mode are
    compared (module notes): other tensors are returned as they are. Cost: a tensor
    already asked about, a few Python comparisons; a new one, one ``torch.equal`` (with a
    bit view for floating dtypes) and a host read.
    """
    if (tensor.requires_grad or tensor.is_complex() or tensor.numel() > CANONICAL_ENTRIES
            or torch.is_inference_mode_enabled() or tensor.is_inference()
            or not tensor.is_contiguous() or _tangent_possible(tensor)):  # fmt: skip
        return tensor
    state = _CANON
    for alias, version, earlier, earlier_version in reversed(state.aliases):
        if alias is tensor:
            if version == tensor._version and earlier._version == earlier_version:
                return earlier
            break
    key = (kind, tensor.shape, tensor.dtype, tensor.device)
    held = state.pool.get(key)
    if held is not None and held[0] is not tensor and held[0]._version == held[1]:
        if _same_bits(tensor, held[0]):
            _remember(state, (tensor, tensor._version, held[0], held[1]))
            return held[0]
    if held is None or held[0] is not tensor or held[0]._version != held[1]:
        state.pool.pop(key, None)
        state.pool[key] = (tensor, tensor._version)
        while len(state.pool) > CANONICAL_POOL:
            state.pool.pop(next(iter(state.pool)))
    return tensor


def _tangent_possible(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` may carry a forward-mode tangent (inside ``forward_ad.dual_level``,
    a dual tensor has ``requires_grad`` False: mapped to an earlier plain tensor of the same
    primal bits, its facts would lose the tangent)."""
    if forward_ad._current_level < 0:
        return False
    return forward_ad.unpack_dual(tensor).tangent is not None


def _remember(state: _Canon, alias: tuple) -> None:
    """Keep an alias, the last :data:`CANONICAL_POOL` of them (a tensor asked again drops
    its older entry)."""
    state.aliases = [a for a in state.aliases if a[0] is not alias[0]][-CANONICAL_POOL + 1 :]
    state.aliases.append(alias)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one shape, dtype and device hold the same bit patterns."""
    if a.dtype.is_floating_point:
        bits = _BITS.get(a.element_size())
        if bits is None:
            return False
        a, b = a.view(bits), b.view(bits)
    return torch.equal(a, b)
