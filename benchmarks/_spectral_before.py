"""circle_sums as on main before issue 35's thread fix (at 0b9e219): the calling thread
keeps torch's thread count between the passes, and every block builds fresh tables.
Timed against the engine by ``benchmarks/spectral.py --threads``; not part of tpde."""

from __future__ import annotations

import torch

from tpde._engines.spectral import (
    SPECTRAL_MAX_MODES,
    _bilinear,
    _blocks,
    _coefficients,
    _sizes,
    _tables,
    bessel_ive,
    degree_estimate,
)


def circle_sums_before(points: torch.Tensor, weights: torch.Tensor, beta, K: int | None = None):
    """The spectral sums of :func:`tpde._engines.spectral.circle_sums`, as before."""
    beta = torch.as_tensor(beta, dtype=points.dtype, device=points.device)
    batch = torch.broadcast_shapes(points.shape[:-2], weights.shape[:-1], beta.shape)
    points = points.expand(*batch, *points.shape[-2:]).reshape(-1, *points.shape[-2:])
    weights = weights.to(points.dtype).expand(*batch, weights.shape[-1])
    weights = weights.reshape(-1, weights.shape[-1], 1)
    betas = tuple(beta.detach().expand(batch).reshape(-1).tolist())
    floor = float((weights.detach().amin(-2) / weights.detach().sum(-2)).min())
    distinct = sorted(set(betas))
    if K is None:
        target = torch.finfo(points.dtype).eps * floor
        degree_estimate(max(distinct), target, "spectral", SPECTRAL_MAX_MODES)
        K, ive = _coefficients(tuple(distinct), target)
        ive = ive[[distinct.index(b) for b in betas]] if len(distinct) > 1 else ive
    else:
        ive = bessel_ive(torch.tensor(betas, dtype=torch.float64, device="cpu"), K)
    R, H = _sizes(K)

    tokens = points.transpose(-1, -2)  # (B, 2, n): one row per coordinate
    grad = torch.is_grad_enabled() and (points.requires_grad or weights.requires_grad)

    def moments(x, w):
        low, high = _tables(x, R, H)
        return (w * high) @ low.transpose(-1, -2)  # (B, 2H, 2R)

    X = sum(_blocks(moments, tokens, weights.transpose(-1, -2), grad=grad))
    g, gi, l, li = slice(0, H), slice(H, 2 * H), slice(0, R), slice(R, 2 * R)
    m = torch.complex(X[:, g, l] - X[:, gi, li], X[:, g, li] + X[:, gi, l])  # m_{hR + r}
    m_bar = m.reshape(-1, H * R)[:, : K + 2].conj()
    c = ive.to(device=points.device, dtype=m.dtype).expand(m_bar.shape[0], -1)
    d = c * m_bar[:, : K + 1] * torch.where(torch.arange(K + 1, device=c.device) > 0, 2, 1)
    u = c * torch.cat([m_bar[:, 1:2].conj(), m_bar[:, :K]], dim=-1)  # m̄_{k−1}, m̄_{−1} = m_1
    v = torch.cat([torch.zeros_like(c[:, :1]), c[:, 1:] * m_bar[:, 2 : K + 2]], dim=-1)
    forms = torch.cat(
        [
            _bilinear(d, R, H, "real"),
            _bilinear(u, R, H, "real") + _bilinear(v, R, H, "real"),
            _bilinear(u, R, H, "imag") - _bilinear(v, R, H, "imag"),
        ],
        dim=-1,
    )  # (B, 2R, 3·2H)

    forms = forms.transpose(-1, -2)  # (B, 3·2H, 2R)

    def combine(low, high):
        return ((forms @ low).unflatten(-2, (3, 2 * H)) * high.unsqueeze(-3)).sum(-2)

    parts = _blocks(lambda x: combine(*_tables(x, R, H)), tokens, grad=grad)
    out = torch.cat(parts, dim=-1).transpose(-1, -2)  # (B, n, 3)
    return out.reshape(*batch, *out.shape[-2:])
