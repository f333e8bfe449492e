"""Adversarial inputs, fourth round (issue 28): fields and metrics.

Classes: stationary states that move (a rounded 0 normalised into a unit vector); errors
that blame the wrong argument; degenerate inputs that must be refused (LayerNorm in d = 1,
the Bures barycentre of singular covariances). Each case asserts a clear error (type and
message) or a documented result against an oracle (tpde.theory's law, a float64 value by
hand). "fixed" marks the cases that failed before this round's fixes; the counts per class
are in the section headers.
"""

import math

import pytest
import torch

from tests.adversarial.strategies import F64, error_table_test
from tpde.attention import Cosine, MultiHead, Normalized, Softmax
from tpde.measures import Empirical
from tpde.theory import equiangular_velocity

I2, I3 = torch.eye(2, dtype=F64), torch.eye(3, dtype=F64)


def simplex(n: int, d: int) -> torch.Tensor:
    """The regular simplex of n ≤ d + 1 unit vectors in R^d (⟨x_i, x_j⟩ = −1/(n − 1))."""
    if d == 2:
        angles = 2 * math.pi * torch.arange(n, dtype=F64) / n
        return torch.stack([angles.cos(), angles.sin()], -1)
    e = torch.eye(n, dtype=F64) - 1 / n  # centred basis vectors, rank n − 1
    basis = torch.linalg.svd(e)[2][: n - 1]  # an orthonormal basis of their span
    points = e @ basis.T
    points = points / points.norm(dim=-1, keepdim=True)
    return torch.nn.functional.pad(points, (0, d - (n - 1)))


# ------------------------------------------------ stationary states (14 cases, 10 failed before)
STATIONARY = {  # field on tokens at the regular simplex, β = 0: Γ = V·mean = 0 exactly
    "simplex-3-d2": (Softmax(0 * I2, I2, I2), simplex(3, 2)),
    "simplex-4-d3": (Softmax(0 * I3, I3, I3), simplex(4, 3)),
    "antipodal-d3": (Softmax(0 * I3, I3, 2 * I3), simplex(2, 3)),
    "simplex-3-multihead": (MultiHead([Softmax(0 * I2, I2, I2)] * 2), simplex(3, 2)),
}


@pytest.mark.parametrize("scheme", ["peri-ln", "ngpt", ("ngpt", {"tangent": False})], ids=str)
@pytest.mark.parametrize("name", STATIONARY)
def test_a_stationary_state_does_not_move(name, scheme):
    # fixed: peri-ln and ngpt moved at unit speed (9 of 12 failed before; the antipodal pair
    # has an exact 0 and passed under every scheme; ngpt tangent=False is radial).
    field, points = STATIONARY[name]
    scheme, options = scheme if isinstance(scheme, tuple) else (scheme, {})
    velocity = Normalized(field, scheme, **options).velocity(Empirical(points))
    # tpde.theory's law for the scheme at the simplex (ρ = −1/(n − 1)), β = 0: ρ̇ = 0.
    n = points.shape[0]
    law = equiangular_velocity(-1 / (n - 1), 1.0, beta=0.0, n=n, scheme=scheme)
    assert float(law[0]) == 0.0
    if options:  # tangent=False: the layer's direction α(N(Γ) − x) = −αx, radial only
        velocity = velocity - (velocity * points).sum(-1, keepdim=True) * points
    assert float(velocity.abs().max()) <= 1e-15


def test_a_tiny_field_still_moves_at_unit_speed():
    # The threshold is relative to the field's values, not absolute: V = 1e-200 I away
    # from a stationary state still gives Peri-LN's unit speed.
    points = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=F64)
    velocity = Normalized(Softmax(I2, I2, 1e-200 * I2), "peri-ln").velocity(Empirical(points))
    torch.testing.assert_close(velocity.norm(dim=-1), torch.ones(3, dtype=F64))


def test_a_query_orthogonal_to_q_has_no_direction_in_cosine_attention():
    # fixed: Qx = 0.1 + 0.2 − 0.3 = 5.6e-17 (a rounded 0) was normalised to the direction
    # +1, so that token scored β·cos = +β against every key instead of 0 (uniform weights).
    Q = torch.ones(1, 3, dtype=F64)
    x = torch.tensor([[0.1, 0.2, -0.3]], dtype=F64)
    keys = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.5]], dtype=F64)
    field = Cosine(Q, I3[:1], I3, scale=50.0)
    got = field.velocity(Empirical(keys), x)
    torch.testing.assert_close(got, keys.mean(0, keepdim=True), rtol=1e-14, atol=1e-14)


# ------------------------------------------------------------------------- the error table
ERRORS = {}

test_bad_input_raises_a_clear_error = error_table_test(ERRORS)
