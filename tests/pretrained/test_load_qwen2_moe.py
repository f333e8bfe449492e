"""Qwen2-MoE (tpde/pretrained/families/qwen2_moe.py) against transformers: routed experts with
or without renormalisation, the gated shared expert, the per-expert split."""

from __future__ import annotations

import pytest
import torch

from tests.pretrained.family_oracle import (
    assert_exact,
    compare,
    compare_classes,
    edit_config,
    float64_router,
    redraw,
    unpatched_gap,
)
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")


def _model(seed=4, head="ForCausalLM", **extra):
    config = transformers.Qwen2MoeConfig(**{
        "vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "moe_intermediate_size": 12,
        "shared_expert_intermediate_size": 20, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
        "max_position_embeddings": 32, **extra})  # fmt: skip
    model = redraw(getattr(transformers, f"Qwen2Moe{head}")(config), seed)
    model.set_experts_implementation("eager")
    return model


@pytest.mark.parametrize("normalize", [False, True])
def test_qwen2_moe_equals_transformers(tmp_path, monkeypatch, normalize):
    from transformers.models.qwen2_moe import modeling_qwen2_moe

    float64_router(monkeypatch, modeling_qwen2_moe.Qwen2MoeTopKRouter)
    errors = compare(_model(norm_topk_prob=normalize), tmp_path, torch.arange(3, 14), experts=True)
    assert_exact(errors)
    mine = load(tmp_path, dtype=torch.float64)
    mlp = mine.layer(1).mlp
    assert mlp.normalize is normalize and mlp.shared is not None and mlp.shared.hidden == 20
    parts = mine.split(mine.embed(torch.arange(3, 14))[0], experts=True)
    assert parts.shape == (2, 1 + 4 + 1, 11, 16)  # attention, 4 experts, the shared expert


def test_qwen2_moe_against_transformers_own_float32_router(tmp_path):
    """Unpatched, transformers' router softmax in float32 is the one difference (1e-8 here):
    the float64 router of the other test is that code, its cast removed."""
    assert 1e-14 < unpatched_gap(_model(), tmp_path, torch.arange(3, 14)) < 1e-6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mlp_only_layers": [1]}, r"mlp_only_layers = \[1\]"),
        ({"decoder_sparse_step": 2}, "decoder_sparse_step = 2"),
        ({"num_experts_per_tok": 7}, "num_experts_per_tok = 7 experts per token exceeds "
                                     "num_experts = 4 experts"),
        ({"norm_topk_prob": "no"}, "norm_topk_prob must be true or false; received 'no'"),
        ({"shared_expert_intermediate_size": 0},
         "shared_expert_intermediate_size must be an integer >= 1; received 0"),
        ({"num_experts": 8}, r"'model.layers.0.mlp.gate.weight' has shape \(4, 16\); the "
                             r"config implies \(8, 16\)"),
        # transformers makes every layer dense (of width intermediate_size) with no experts
        ({"num_experts": 0}, "num_experts must be an integer >= 1; received 0"),
    ],
)  # fmt: skip
def test_qwen2_moe_refusals_name_the_key(tmp_path, change, message):
    _model().save_pretrained(tmp_path)
    edit_config(tmp_path, **change)
    with pytest.raises(LoadError, match=message):
        load(tmp_path)


def test_qwen2_moe_sliding_window_is_refused(tmp_path):
    """transformers' Qwen2-MoE slides its window over the layers l < max_window_layers with l
    even (not Qwen2's l ≥ max_window_layers), a pattern tpde does not read: refused, naming
    use_sliding_window (without it transformers sets the window to 0, and every layer is
    global)."""
    config = transformers.Qwen2MoeConfig(
        num_hidden_layers=4, use_sliding_window=True, max_window_layers=3, sliding_window=4
    )
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2
    assert transformers.Qwen2MoeConfig(sliding_window=4).sliding_window == 0
    _model().save_pretrained(tmp_path)
    edit_config(tmp_path, use_sliding_window=True, sliding_window=4)
    with pytest.raises(LoadError, match=r"use_sliding_window = True, which changes the"):
        load(tmp_path)


def test_qwen2_moe_sequence_classification(tmp_path, monkeypatch):
    from transformers.models.qwen2_moe import modeling_qwen2_moe

    float64_router(monkeypatch, modeling_qwen2_moe.Qwen2MoeTopKRouter)
    model = _model(head="ForSequenceClassification", num_labels=3, pad_token_id=0)
    compare_classes(model, tmp_path)
