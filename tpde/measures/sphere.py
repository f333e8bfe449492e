"""Measures on the unit sphere S^{d−1}: the token clouds of normalised Transformers."""

from __future__ import annotations

import torch

from tpde._scale_safe import unit
from tpde._validation import check_float_dtype, check_positive_int
from tpde.measures.empirical import Empirical

__all__ = ["uniform_on_sphere"]


def uniform_on_sphere(
    n: int,
    d: int,
    *,
    batch: tuple[int, ...] = (),
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Empirical:
    """``n`` i.i.d. uniform points on S^{d−1} with weights 1/n: an :class:`Empirical`.

    Drawn as Gaussian vectors divided by their norms (the uniform law is the only
    rotation-invariant one on the sphere). ``batch`` adds leading dimensions: a batch of
    independent clouds (points of shape ``(*batch, n, d)``), e.g. the systems of a phase
    diagram. Draws are made on the generator's device (the CPU by default) and moved to
    ``device``, so a seed gives the same points everywhere.
    """
    n, d = check_positive_int(n, "n"), check_positive_int(d, "d")
    if d < 2:
        raise ValueError(f"the sphere S^(d-1) needs d >= 2; received d = {d}.")
    check_float_dtype(dtype)
    if isinstance(batch, int):
        raise TypeError(f"batch must be a tuple of sizes, e.g. ({batch},); received {batch!r}.")
    shape = (*(check_positive_int(b, "batch size") for b in batch), n, d)
    draw_device = generator.device if generator is not None else "cpu"
    z = torch.randn(shape, generator=generator, dtype=dtype, device=draw_device)
    return Empirical(unit(z).to(device or draw_device))
