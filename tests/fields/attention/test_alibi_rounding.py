"""ALiBi formed as a checkpoint's code forms it (``rounding``, ``scale``): equal, bit for bit,
to transformers' BLOOM and Falcon ``build_alibi_tensor`` for any head count."""

from __future__ import annotations

import math

import pytest
import torch

from tpde.fields import ALiBi

transformers = pytest.importorskip("transformers")

F64 = torch.float64


@pytest.mark.parametrize("heads", [1, 4, 6, 12, 16, 32, 71])
def test_rounded_bias_is_blooms_and_falcons(heads):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor as bloom
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor as falcon

    n, head_dim = 1000, 64
    mask = torch.ones(1, n, dtype=torch.long)
    positions = torch.arange(n, dtype=F64)
    expected = bloom(mask, heads, F64).reshape(heads, n)
    mine = ALiBi(rounding="float32").key_bias(positions, heads)
    torch.testing.assert_close(mine, expected, rtol=1e-15, atol=0)  # a float32 ulp: 6e-8
    expected = falcon(mask, heads, F64).reshape(heads, n) / math.sqrt(head_dim)
    mine = ALiBi(rounding="bfloat16", scale=1 / math.sqrt(head_dim)).key_bias(positions, heads)
    torch.testing.assert_close(mine, expected, rtol=1e-15, atol=0)


def test_rounding_matters_where_the_slopes_are_not_representable():
    exact = ALiBi().key_bias(torch.arange(300, dtype=F64), 32)
    bf16 = ALiBi(rounding="bfloat16").key_bias(torch.arange(300, dtype=F64), 32)
    assert float(((bf16 - exact).abs() / exact.abs().clamp_min(1e-300)).max()) > 1e-3
    positions = torch.arange(8.0, dtype=F64)  # slopes 2^{-h}: float32 forms them exactly
    torch.testing.assert_close(ALiBi(rounding="float32").key_bias(positions, 8),
                               ALiBi().key_bias(positions, 8), rtol=1e-15, atol=0)  # fmt: skip


def test_bad_rounding_and_scale_are_named():
    with pytest.raises(ValueError, match="unknown ALiBi rounding 'float16'; choose one of"):
        ALiBi(rounding="float16")
    with pytest.raises(ValueError, match=r"ALiBi scale must be finite and > 0; received 0\.0"):
        ALiBi(scale=0.0)
