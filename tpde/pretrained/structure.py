r"""How much of a loaded model's attention is a gradient flow, layer by layer and head by head.

For every attention sublayer of a :class:`~tpde.pretrained.Transformer` (each block of an
ALBERT layer group too), :func:`model_structure` projects its heads onto the gradient structure
(:func:`tpde.fields.nearest_gradient_field`: weights only) and, given a token measure,
measures the dynamic gap (:func:`tpde.fields.dynamic_gap`) on the tokens that sublayer reads
in the network: x_{l,k} = x_l + Σ_{k' < k} v_{l,k'} from the per-sublayer split
(:meth:`Transformer.split`), then N₁(x) for a Pre-norm sublayer, x for a Post-norm one
(MATH.md §8). Positions, masks, GQA, RoPE, QK-norms and soft-caps are the loaded fields'
own; nothing here depends on the family.

:func:`depth_energies` asks what the network's own tokens do to each sublayer's structured
energy 𝓔_l = Σ_h s_h E_h (the functional its nearest gradient field ascends, MATH.md §12),
evaluated on the tokens as the sublayer reads them (y = N₁(x) for Pre-norm, x for Post-norm):
before the sublayer, after its attention step x + v (v = Attn[N₁#μ](N₁x) for Pre-norm,
N₂(Attn[N₁#μ](N₁x)) for Peri-norm (its output norm included, as the per-sublayer split),
Attn[μ](x) for Post-norm, before the Post-norm's projection: a LayerNorm rescales the tokens
and with them every exponential score, so it is not part of the attention's step) and after
the whole layer, beside the rate the structure predicts, d𝓔/dt = ⟨∇𝓔, Γ_s⟩ along the nearest
gradient field (≥ 0 where the sublayer is one exact head without drift), and the first-order
change of the network's own step, ⟨∇_x 𝓔(N₁x), v⟩ (autograd through N₁).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tpde.fields import dynamic_gap, nearest_gradient_field
from tpde.measures import Empirical
from tpde.pretrained.transformer import Transformer, check_layer_index

__all__ = ["DepthEnergies", "ModelStructure", "depth_energies", "model_structure"]


@dataclass(frozen=True)
class ModelStructure:
    """Result of :func:`model_structure`, one entry per attention sublayer in depth order.

    Attributes
    ----------
    places : tuple of (layer, block) pairs (block 0 unless the layer is an ALBERT group).
    reports : tuple of :class:`~tpde.fields.StructureReport` (weights only).
    gaps : tuple of :class:`~tpde.fields.DynamicGap`, or None without a token measure.
    """

    places: tuple[tuple[int, int], ...]
    reports: tuple
    gaps: tuple | None

    def table(self, name: str) -> torch.Tensor:
        """A per-head score of every sublayer, (S, H) float64 (H the most heads of a
        sublayer; NaN-padded): a :class:`~tpde.fields.HeadStructure` attribute such as
        ``"symmetry"``, or ``"dynamic_gap"`` (the per-head gaps, with a token measure)."""
        if name == "dynamic_gap":
            if self.gaps is None:
                raise ValueError(
                    "this ModelStructure was computed without tokens: pass mu to "
                    "model_structure for the dynamic gaps."
                )
            rows = [gap.head_gaps.detach().to(torch.float64).cpu() for gap in self.gaps]
        else:
            rows = [report.scores(name) for report in self.reports]
        width = max(len(r) for r in rows)
        out = torch.full((len(rows), width), float("nan"), dtype=torch.float64, device="cpu")
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out

    def layer_scores(self, name: str) -> torch.Tensor:
        """A per-sublayer number, (S,) float64: Saponati et al.'s layer-level ``"symmetry"``
        or ``"directionality"`` (:class:`~tpde.fields.StructureReport`), or
        ``"dynamic_gap"`` (the whole sublayer's relative gap, with a token measure)."""
        if name == "dynamic_gap":
            self.table(name)  # the same refusal without tokens
            values = [float(gap.relative_gap) for gap in self.gaps]
        elif name in ("symmetry", "directionality"):
            values = [getattr(report, name) for report in self.reports]
        else:
            raise ValueError(
                "layer_scores takes 'symmetry', 'directionality' or 'dynamic_gap'; received "
                f"{name!r} (per-head scores: table)."
            )
        return torch.tensor(values, dtype=torch.float64, device="cpu")


def model_structure(
    model, mu: Empirical | None = None, *, layers=None, engine: str = "auto", cache=None
) -> ModelStructure:
    """The gradient structure of every attention sublayer of a loaded model (module notes).

    Parameters
    ----------
    model : :class:`~tpde.pretrained.Transformer` (from :func:`tpde.pretrained.load`).
    mu : Empirical, optional
        A sentence's depth-0 tokens (``model.embed(...)[0]``): with it, the dynamic gap of
        each sublayer on the tokens it reads in the network.
    layers : sequence of layer indices, optional
        The layers to report (default all); the tokens still run through every layer.
    engine : pairwise engine of the velocities.
    cache : dict, optional
        The projections of :func:`tpde.fields.nearest_gradient_field` by (layer, block),
        filled here and reused: pass one dict to several calls on the same model and
        weights (the projections dominate the cost).

    Returns
    -------
    :class:`ModelStructure`.
    """
    if not isinstance(model, Transformer):
        raise TypeError(
            f"model_structure reads a tpde.pretrained.Transformer (tpde.pretrained.load); "
            f"received {type(model).__name__} (the weights-only scores of a checkpoint on "
            "disk: tpde.pretrained.weight_scores(path), one layer at a time)."
        )
    places, reports, gaps = [], [], []
    clouds = None if mu is None else _sublayer_inputs(model, mu, engine)
    for l in _layer_indices(model, layers):
        layer = model.layers[l]
        for b, block in enumerate(getattr(layer, "blocks", (layer,))):
            places.append((l, b))
            if clouds is None:
                reports.append(nearest(block, (l, b), cache)[1])
                continue
            seen = _read_by(block, clouds[l][2 * b], mu)
            projected = nearest(block, (l, b), cache)
            gap = dynamic_gap(block.attention, seen, engine=engine, nearest=projected)
            reports.append(gap.report)
            gaps.append(gap)
    return ModelStructure(tuple(places), tuple(reports), None if mu is None else tuple(gaps))


def nearest(block, place, cache: dict | None):
    """``nearest_gradient_field(block.attention)``, through ``cache[place]`` when given."""
    if cache is None:
        return nearest_gradient_field(block.attention)
    if place not in cache:
        cache[place] = nearest_gradient_field(block.attention)
    return cache[place]


def _layer_indices(model, layers) -> list[int]:
    """The layer indices asked for (all by default), each checked by ``model.layer``."""
    return layer_indices(len(model.layers), layers)


def layer_indices(count: int, layers) -> list[int]:
    """The layer indices asked for of a model of ``count`` layers (all by default): a
    TypeError for anything but a sequence of ints, an IndexError naming the range."""
    if layers is None:
        return list(range(count))
    chosen = None if isinstance(layers, int | str) else getattr(layers, "__iter__", None)
    chosen = None if chosen is None else list(layers)
    if chosen is None or not all(isinstance(l, int) for l in chosen):
        raise TypeError(f"layers must be a sequence of layer indices; received {layers!r}.")
    return [check_layer_index(l, count) for l in chosen]


def _sublayer_inputs(model, mu: Empirical, engine: str) -> list[torch.Tensor]:
    """For each layer, the tokens before each sublayer and after the last: (K + 1, n, d),
    x_{l,k} = x_l + Σ_{k' < k} v_{l,k'} (x_{l,K} = x_{l+1})."""
    split = model.split(mu, engine=engine)  # (L, K, n, d)
    x, out = mu.points, []
    for velocities in split:
        steps = torch.cumsum(velocities, dim=0)
        out.append(torch.cat([x[None], x[None] + steps]))
        x = x + steps[-1]
    return out


def _read_by(block, x: torch.Tensor, mu: Empirical) -> Empirical:
    """The tokens a block's attention reads: N₁(x) for a Pre-norm block, x for Post-norm."""
    norm = block.attention_norm
    seen = norm.norm(x) if norm is not None and norm.placement == "pre" else x
    return Empirical(seen, mu.weights, positions=mu.positions)


@dataclass(frozen=True)
class DepthEnergies:
    """Result of :func:`depth_energies`, one entry per attention sublayer (S of them).

    Attributes
    ----------
    places : tuple of (layer, block).
    before, after_attention, after : (S,) float64, 𝓔_l on the tokens the sublayer reads,
        at its input, after its attention step x + v (before a Post-norm's projection),
        after its layer (its block for an ALBERT group; a Post-norm layer's output is
        LayerNorm-scaled).
    structured_rate : (S,) d𝓔_l/dt along the nearest gradient field at the input (its
        predicted sign: ≥ 0 where the structure holds).
    network_rate : (S,) ⟨∇_x 𝓔_l(N₁x), v⟩, the first-order change of the network's own
        attention step v.
    log_scale : (S,) every column above is e^{−log_scale} times its value: 0 unless some
        E_h at the three states passes √(the largest float), then the largest log E_h
        (a real decoder's unnormalised scores give 𝓔 ≈ e^{10³}, beyond float64). Signs,
        :attr:`agrees` and :attr:`relative_change` do not depend on it.
    """

    places: tuple[tuple[int, int], ...]
    before: torch.Tensor
    after_attention: torch.Tensor
    after: torch.Tensor
    structured_rate: torch.Tensor
    network_rate: torch.Tensor
    log_scale: torch.Tensor

    @property
    def change(self) -> torch.Tensor:
        """after_attention − before: what the attention step did to 𝓔_l, (S,)."""
        return self.after_attention - self.before

    @property
    def relative_change(self) -> torch.Tensor:
        """(after_attention − before) / |before|, (S,): scale-free."""
        return self.change / self.before.abs()

    @property
    def agrees(self) -> torch.Tensor:
        """Whether the attention step moved 𝓔_l with the sign the structure predicts, (S,)."""
        return torch.sign(self.change) == torch.sign(self.structured_rate)


def depth_energies(
    model, mu: Empirical, *, layers=None, engine: str = "auto", cache=None
) -> DepthEnergies:
    """Each attention sublayer's structured energy along the network's own tokens (module
    notes).

    Parameters
    ----------
    model : :class:`~tpde.pretrained.Transformer`.
    mu : Empirical, a sentence's depth-0 tokens (``model.embed(...)[0]``).
    layers : sequence of layer indices, optional (default all).
    engine : pairwise engine of the velocities.
    cache : dict of projections by (layer, block), as :func:`model_structure`'s.

    Returns
    -------
    :class:`DepthEnergies` (energies are O(n²) dense sums per head).
    """
    if not isinstance(model, Transformer):
        raise TypeError(
            f"depth_energies reads a tpde.pretrained.Transformer (tpde.pretrained.load); "
            f"received {type(model).__name__}."
        )
    if not isinstance(mu, Empirical):
        raise TypeError(f"mu must be an Empirical of tokens; received {type(mu).__name__}.")
    indices = _layer_indices(model, layers)
    clouds = _sublayer_inputs(model, mu, engine)
    places, rows = [], []
    for l in indices:
        layer = model.layers[l]
        blocks = getattr(layer, "blocks", (layer,))
        for b, block in enumerate(blocks):
            near, _ = nearest(block, (l, b), cache)
            x_in, x_out = clouds[l][2 * b], clouds[l][2 * b + 2]
            seen = _read_by(block, x_in, mu)
            step = attention_step(block, clouds[l], b, seen, engine)
            states = [_read_by(block, x, mu) for x in (x_in, x_in + step, x_out)]
            scale = near.energy_log_scale(*states)
            energy = [near.energy(state, log_scale=scale) for state in states]
            rate = near.energy_rate(seen, near.velocity(seen, engine=engine), log_scale=scale)
            places.append((l, b))
            network = _network_rate(near, block, x_in, step, mu, scale)
            rows.append((*energy, rate, network, energy[0].new_tensor(scale)))
    columns = [torch.stack([r[i] for r in rows]).detach().to(torch.float64) for i in range(6)]
    return DepthEnergies(tuple(places), *columns)


def attention_step(block, cloud: torch.Tensor, b: int, seen: Empirical, engine: str):
    """A block's attention update of the residual stream: the split's x_{l,2b+1} − x_{l,2b}
    (Pre-norm: Attn(N₁x); Peri-norm: N₂(Attn(N₁x)), its output norm included), or Attn(x)
    before the LayerNorm for a Post-norm block (its projection is not the attention's step)."""
    norm = block.attention_norm
    if norm is not None and norm.placement == "post":
        return block.attention.velocity(seen, engine=engine)
    return cloud[2 * b + 1] - cloud[2 * b]


def _network_rate(near, block, x_in, step, mu: Empirical, log_scale: float) -> torch.Tensor:
    """e^{−log_scale}⟨∇_x 𝓔(read(x)), v⟩ at x_in, autograd through the block's norm."""
    with torch.enable_grad():
        x = x_in.detach().requires_grad_(True)
        energy = near.energy(_read_by(block, x, mu), log_scale=log_scale)
        (grad,) = torch.autograd.grad(energy, x)
    return (grad * step).sum()
