"""Conditional W2 for measures with positions (MATH.md §5)."""

import math

import ot
import pytest
import torch

from tpde.measures import Empirical, Gaussian
from tpde.metrics import conditional_w2, w2

F64 = torch.float64


def test_one_position_is_w2(generator):
    x = torch.randn(12, 2, generator=generator, dtype=F64)
    y = torch.randn(9, 2, generator=generator, dtype=F64) + 1.0
    mu = Empirical(x, positions=torch.full((12,), 0.5))
    nu = Empirical(y, positions=torch.full((9,), 0.5))
    assert float(conditional_w2(mu, nu)) == pytest.approx(float(w2(mu, nu)), rel=1e-12)


def test_one_token_per_position_is_the_identity_pairing(generator):
    n = 8
    s = torch.arange(n, dtype=F64) / (n - 1)
    x = torch.randn(n, 3, generator=generator, dtype=F64)
    y = torch.randn(n, 3, generator=generator, dtype=F64)
    w = torch.rand(n, generator=generator, dtype=F64)
    w = w / w.sum()
    mu = Empirical(x, w, positions=s)
    expected = math.sqrt(float((w * ((x - y) ** 2).sum(-1)).sum()))
    # ν listed in another order: positions, not indices, pair the tokens.
    perm = torch.randperm(n, generator=generator)
    nu = Empirical(y[perm], w[perm], positions=s[perm])
    assert float(conditional_w2(mu, nu)) == pytest.approx(expected, rel=1e-12)
    assert float(conditional_w2(mu, nu, reduction="max")) == pytest.approx(
        float(((x - y) ** 2).sum(-1).sqrt().max()), rel=1e-12
    )


def test_several_tokens_per_position_against_pot(generator):
    # Positions {0, 0.5, 1} with masses η; per position an OT problem solved by POT.
    sizes_mu, sizes_nu = [3, 4, 2], [5, 2, 3]
    eta = torch.tensor([0.2, 0.5, 0.3], dtype=F64)
    parts_mu, parts_nu, total = [], [], 0.0
    for k, (n, m) in enumerate(zip(sizes_mu, sizes_nu, strict=True)):
        x = torch.randn(n, 2, generator=generator, dtype=F64)
        y = torch.randn(m, 2, generator=generator, dtype=F64) + k
        a = torch.rand(n, generator=generator, dtype=F64) + 0.1
        b = torch.rand(m, generator=generator, dtype=F64) + 0.1
        a, b = a / a.sum(), b / b.sum()
        total += float(eta[k]) * ot.emd2(a.numpy(), b.numpy(), ot.dist(x.numpy(), y.numpy()))
        parts_mu.append((x, eta[k] * a, torch.full((n,), k / 2, dtype=F64)))
        parts_nu.append((y, eta[k] * b, torch.full((m,), k / 2, dtype=F64)))
    mu = Empirical(*(torch.cat(p) for p in zip(*parts_mu, strict=True)))
    nu = Empirical(*(torch.cat(p) for p in zip(*parts_nu, strict=True)))
    ours = conditional_w2(mu, nu)
    assert float(ours) ** 2 == pytest.approx(total, rel=1e-12)
    # Conditioning restricts the couplings: W_{2|η} ≥ W2 of the x-marginals.
    assert float(ours) >= float(w2(mu, nu)) - 1e-12


def test_gradient_flows_to_points(generator):
    x = torch.randn(6, 2, generator=generator, dtype=F64, requires_grad=True)
    s = torch.tensor([0.0, 0.0, 0.5, 0.5, 1.0, 1.0], dtype=F64)
    nu = Empirical(torch.randn(6, 2, generator=generator, dtype=F64), positions=s)
    (grad,) = torch.autograd.grad(conditional_w2(Empirical(x, positions=s), nu) ** 2, x)
    # Each group of two: the gradient of Σ_groups η W2² is 2 w_i (x_i − T(x_i)); it sums to
    # 2 Σ w_i (x_i − y_σ(i)) within a group, i.e. 2 η (mean_x − mean_y) per group.
    for k in range(3):
        idx = slice(2 * k, 2 * k + 2)
        expected = 2 * (1 / 6) * (x[idx] - nu.points[idx]).sum(0).detach()
        torch.testing.assert_close(grad[idx].sum(0), expected, atol=1e-12, rtol=0)


def test_zero_mass_positions_are_ignored(generator):
    x = torch.randn(4, 2, generator=generator, dtype=F64)
    mu = Empirical(x, torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=F64),
                   positions=torch.tensor([0.0, 1.0, 0.3, 0.3], dtype=F64))  # fmt: skip
    nu = Empirical(x[:2] + 1.0, positions=torch.tensor([0.0, 1.0], dtype=F64))
    assert float(conditional_w2(mu, nu)) == pytest.approx(math.sqrt(2.0), rel=1e-12)


# ----------------------------------------------------------------------------- bad input


def test_mismatched_position_marginals_raise(generator):
    x = torch.randn(4, 2, generator=generator, dtype=F64)
    s = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=F64)
    mu = Empirical(x, positions=s)
    with pytest.raises(ValueError, match=r"position marginals of mu and nu differ.*distinct"):
        conditional_w2(mu, Empirical(x, positions=torch.tensor([0.0, 0.0, 0.5, 1.0])))
    heavy = torch.tensor([0.4, 0.4, 0.1, 0.1], dtype=F64)
    with pytest.raises(ValueError, match=r"masses differ by up to 0\.3"):
        conditional_w2(mu, Empirical(x, heavy, positions=s))


def test_missing_positions_and_wrong_kinds(generator):
    x = torch.randn(3, 2, generator=generator, dtype=F64)
    with_pos = Empirical(x, positions=torch.zeros(3))
    with pytest.raises(ValueError, match="nu has no positions"):
        conditional_w2(with_pos, Empirical(x))
    with pytest.raises(TypeError, match="Gaussian"):
        conditional_w2(Gaussian(torch.zeros(2), torch.eye(2)), with_pos)
    with pytest.raises(ValueError, match="different dimensions"):
        conditional_w2(with_pos, Empirical(torch.zeros(3, 3), positions=torch.zeros(3)))
    with pytest.raises(ValueError, match="unknown reduction"):
        conditional_w2(with_pos, with_pos, reduction="sum")
