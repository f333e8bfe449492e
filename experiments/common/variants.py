"""A registered attention variant from (Q, K, V) (the ``atlas`` and ``meanfield`` studies)."""

from __future__ import annotations

import torch

from tpde.fields.registry import variant as variant_of

__all__ = ["make_field"]


def make_field(variant: str, interaction, value):
    """The registered ``variant`` built from (Q, K, V) = (interaction, I, value), scale 1,
    with the registry's experiment defaults (sigmoid b = 0, multi-head H = 2, masked softmax)."""
    Q = torch.tensor(interaction, dtype=torch.float64)
    K = torch.eye(len(interaction), dtype=torch.float64)
    Vt = torch.tensor(value, dtype=torch.float64)
    return variant_of(variant).standard(Q, K, Vt, 1.0)
