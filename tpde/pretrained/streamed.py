r"""The weights-only structure scores of a checkpoint, streamed one attention sublayer at a time.

:func:`weight_scores` gives what :func:`~tpde.pretrained.model_structure` gives without
tokens — per head the distance to the nearest structured head, the mobility's inertia and
Saponati et al.'s symmetry and directionality of W_Qᵀ W_K; per sublayer the layer-level
scores and what the sum of heads is (MATH.md §12) — without building the Transformer, so
that it runs on a checkpoint larger than the machine's memory.

The road is :func:`tpde.pretrained.load`'s, cut per block: the checkpoint is opened as far
as its headers (a safetensors folder's, through ``safetensors.safe_open``; a GGUF file,
memory-mapped), the config record and the family entry are read and every tensor's name and
shape is checked (:func:`tpde.pretrained.loader.plan`); then, for each stored block in
depth order, only its attention tensors (:data:`~tpde.pretrained._build.ATTENTION_ROLES`:
Q, K, V, O or a fused QKV, the QK-norms) are read, in float64 on the CPU, the family's own
builder makes the block's attention field of them (the field :func:`load` would put in the
model: RoPE, GQA, masks, windows, soft-caps and QK-norms as the family says), and
:func:`tpde.fields.nearest_gradient_field` reports on it; the tensors are dropped before the
next block is read. Nothing here names a family or a tensor.

Equal (in the default float64) to :func:`model_structure`'s weights-only scores of the
loaded model: the same field of the same numbers (a float32 or bfloat16 checkpoint, and a
GGUF file's dequantised float32, are exact in float64, and the projection reads every head
in float64).

Memory: the headers (a GGUF file's metadata without its vocabulary: the
``tokenizer.ggml.*`` arrays are checked and kept as their lengths), one block's attention
tensors in float64 (and their reading), and the work arrays of the heads being projected,
in factor form (MATH.md §12): per head in flight (one per torch thread) ≈ 7 r × r float64
matrices at the bracket's eigendecomposition (E, Ṽ, the bracket, its eigenvectors and
LAPACK's 2r² workspace; 22 MiB at r = d = 640; r = min(d, 2d_h + 2d_v), the width of the
span of W_Qᵀ, W_Kᵀ, W_O, W_Vᵀ, so no d × d matrix where that is < d). Nothing of a head
is kept past its report (``nearest_gradient_field(..., structured=False)``: no basis, no
mobility), never the embeddings, the feed-forward blocks or the other layers: the peak is
the block's attention tensors plus a constant in depth, headers + threads × 7r²·8 bytes
(``benchmarks/streamed_scores.py`` measures it against one layer's size and against
:func:`load` + :func:`model_structure`). Time: with several torch threads the heads of a
block whose projections are ≥ 512 wide (Gemma-3-270M's) are projected in parallel, one per
thread (:func:`tpde.fields.nearest_gradient_field`); ``dtype=torch.float32`` runs their
eigendecompositions and products in float32 (:mod:`tpde.fields.gradient_flow._factored`,
"Precision": every score of the three shipped models within 1.5e-3 of float64's, the counts
equal; ≈ 1.4× less CPU time per head it keeps, but the heads whose rank, sign or mobility
inertia float32 cannot place are projected again in float64 — 24 of Gemma-3-270M's 72, 21 of
SmolLM2's 270 —, so on the shipped models it saves nothing measurable).
"""

from __future__ import annotations

import torch

from tpde.fields import nearest_gradient_field
from tpde.fields.gradient_flow.nearest import working_rtol
from tpde.pretrained import _build
from tpde.pretrained.loader import _open, plan
from tpde.pretrained.structure import ModelStructure, layer_indices

__all__ = ["weight_scores"]


def weight_scores(path, *, layers=None, rtol=None, dtype=torch.float64) -> ModelStructure:
    """The weights-only gradient-structure scores of a checkpoint on disk, streamed (module
    notes): one attention sublayer's tensors in memory at a time.

    Parameters
    ----------
    path : str or Path
        A Hugging Face model folder (safetensors) or a ``.gguf`` file, as
        :func:`tpde.pretrained.load` reads.
    layers : sequence of layer indices, optional
        The layers to report (default all).
    rtol : relative residual below which a structure holds
        (:func:`tpde.fields.nearest_gradient_field`; default 1e-10 in float64, 1e-4 in float32).
    dtype : torch.float64 (default) or torch.float32
        The projections' working precision (:func:`tpde.fields.nearest_gradient_field`): the
        tensors are read in float64 either way; float32 runs the eigendecompositions and
        products ≈ 1.4× faster per head it keeps (a head whose rank, sign or inertia it cannot
        place goes to float64: on the shipped models no net gain, module notes), its scores
        within 1.5e-3 of float64's, and cannot tell an exact structure below 1e-4. float64 is the
        default: its scores equal ``model_structure(load(path))``'s, and an exactly
        structured head is told at 1e-10; float32 is for speed on real checkpoints, whose
        stored weights (4-bit, bfloat16) are far coarser than float32's rounding.

    Returns
    -------
    :class:`~tpde.pretrained.ModelStructure` without gaps (``gaps`` None): one report per
    (layer, block) in depth order, each equal to
    ``model_structure(load(path)).reports[i]``.

    Raises
    ------
    As :func:`tpde.pretrained.load` for the checkpoint (LoadError naming a missing,
    unexpected or misshapen tensor: a checkpoint without its attention weights); TypeError
    or IndexError for ``layers``, TypeError for ``dtype``, ValueError for ``rtol``: all
    before any tensor is read.
    """
    rtol = working_rtol(dtype, rtol)  # before any tensor is read
    source = _open(path, window_matters=False)
    cfg, entry, expected = plan(source)
    indices = layer_indices(cfg.layers, layers)
    by_block: dict[int, dict] = {}
    for name, (role, block, part, shape) in expected.items():
        if block is not None and role in _build.ATTENTION_ROLES:
            by_block.setdefault(block, {})[name] = (role, block, part, shape)
    places, reports, done = [], [], {}
    for l in indices:
        for j, block in enumerate(_stored_blocks(cfg, l)):
            if block not in done:  # an ALBERT group's block is reported once, then reused
                done[block] = _block_report(source, cfg, entry, by_block[block], block, rtol, dtype)
            places.append((l, j))
            reports.append(done[block])
    return ModelStructure(tuple(places), tuple(reports), None)


def _stored_blocks(cfg, l: int) -> list[int]:
    """The stored blocks layer l applies, in order: block l, or ALBERT's group ⌊l/(L/G)⌋."""
    if cfg.groups is None:
        return [l]
    k = cfg.group_blocks
    g = cfg.layer_group(l)
    return list(range(g * k, (g + 1) * k))


def _block_report(source, cfg, entry, expected: dict, block: int, rtol: float, dtype):
    """The StructureReport of one stored block's attention, its tensors read alone."""
    tensors = source.read(cfg, expected, torch.float64, torch.device("cpu"))
    weights = {role: w for (role, _), w in _build._gather(expected, tensors, entry).items()}
    del tensors
    attention = _build.block_attention(weights, cfg, entry, block)
    return nearest_gradient_field(attention, rtol=rtol, dtype=dtype, structured=False)[1]
