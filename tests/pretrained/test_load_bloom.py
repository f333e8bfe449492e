"""BLOOM (tpde/pretrained/families/bloom.py) against transformers: ALiBi (the bias formed in
float32, as BLOOM's code), the embedding LayerNorm, BLOOM's GELU constant."""

from __future__ import annotations

import pytest
import torch

from tests.pretrained.family_oracle import (
    assert_exact,
    compare,
    compare_classes,
    edit_config,
    float64_softmax,
    redraw,
    unpatched_gap,
)
from tpde.fields import ALiBi
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")


def _model(heads: int, seed: int = 6, head: str = "ForCausalLM", **extra):
    config = transformers.BloomConfig(
        vocab_size=40, hidden_size=4 * heads, n_layer=2, n_head=heads, **extra
    )
    return redraw(getattr(transformers, f"Bloom{head}")(config), seed)


@pytest.mark.parametrize("heads", [4, 6])  # slopes powers of two; H − P interleaved ones
def test_bloom_equals_transformers(tmp_path, monkeypatch, heads):
    float64_softmax(monkeypatch)  # BLOOM casts the scores to float32 for the softmax
    assert_exact(compare(_model(heads), tmp_path, torch.arange(3, 14)))
    mine = load(tmp_path, dtype=torch.float64)
    position = mine.layer(0).attention.position
    assert position == ALiBi(rounding="float32") and mine.layer(0).mlp.activation_name == (
        "gelu-tanh-bloom"
    )
    assert mine.embedding.norm is not None and mine.embedding.positions is None


def test_bloom_against_transformers_own_float32_softmax(tmp_path):
    """Unpatched, transformers' float32 softmax is the one difference: 1e-8 relative here."""
    assert 1e-14 < unpatched_gap(_model(4), tmp_path, torch.arange(3, 14)) < 1e-6


def test_bloom_reads_n_embed_and_refuses_the_post_layernorm_residual(tmp_path):
    _model(4).save_pretrained(tmp_path)
    edit_config(tmp_path, hidden_size=None, n_embed=16)  # older configs
    assert load(tmp_path).config.hidden == 16
    edit_config(tmp_path, hidden_size=8)  # n_embed wins, as in BloomConfig
    assert load(tmp_path).config.hidden == 16
    edit_config(tmp_path, apply_residual_connection_post_layernorm=True)
    with pytest.raises(LoadError, match="apply_residual_connection_post_layernorm = True"):
        load(tmp_path)


def test_bloom_tensor_parallel_keys(tmp_path, monkeypatch):
    """pretraining_tp = 2 without slow_but_exact: the same function (tpde equals
    transformers). With slow_but_exact transformers drops the biases of the attention's
    output map and of dense_4h_to_h (its logits move by far more than rounding): refused,
    naming both keys, as is a slow_but_exact that is not a boolean."""
    float64_softmax(monkeypatch)
    model = _model(4, pretraining_tp=2)
    assert_exact(compare(model, tmp_path, torch.arange(3, 14)))
    ids = torch.arange(3, 14)[None]
    with torch.no_grad():
        before = model(ids).logits
        model.config.slow_but_exact = True
        for block in model.transformer.h:
            block.self_attention.slow_but_exact = block.mlp.slow_but_exact = True
        assert (model(ids).logits - before).norm() > 1e-3 * before.norm()
    edit_config(tmp_path, slow_but_exact=True)
    with pytest.raises(LoadError, match=rf"{tmp_path}.*pretraining_tp = 2 with slow_but_exact "
                                        r"= true: .* without their biases"):  # fmt: skip
        load(tmp_path)
    edit_config(tmp_path, slow_but_exact="yes")
    with pytest.raises(LoadError, match=r"slow_but_exact must be true or false; received 'yes'"):
        load(tmp_path)


def test_bloom_sequence_classification(tmp_path, monkeypatch):
    float64_softmax(monkeypatch)
    model = _model(4, head="ForSequenceClassification", num_labels=3, pad_token_id=0)
    compare_classes(model, tmp_path)
