"""Mixtral (tpde/pretrained/families/mixtral.py) against transformers: the routed MLP as a
MixtureOfExperts field, its per-expert split, and the refusals of bad routing (top-k >
experts, k < 1, a missing or mismatched expert count, a missing expert tensor)."""

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
from tpde.fields import MixtureOfExperts
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")


def _model(seed=3, head="ForCausalLM", **extra):
    config = transformers.MixtralConfig(**{
        "vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
        "num_experts_per_tok": 2, "max_position_embeddings": 32, **extra})  # fmt: skip
    model = redraw(getattr(transformers, f"Mixtral{head}")(config), seed)
    model.set_experts_implementation("eager")  # the grouped kernel takes no float64
    return model


def test_mixtral_against_transformers_own_float32_router(tmp_path):
    """Unpatched, transformers' router softmax in float32 is the one difference (1e-8 here):
    the float64 router of the other test is that code, its cast removed."""
    assert 1e-14 < unpatched_gap(_model(), tmp_path, torch.arange(3, 14)) < 1e-6


@pytest.mark.parametrize("extra", [{}, {"sliding_window": 3, "num_experts_per_tok": 3}])
def test_mixtral_equals_transformers(tmp_path, monkeypatch, extra):
    from transformers.models.mixtral import modeling_mixtral

    float64_router(monkeypatch, modeling_mixtral.MixtralTopKRouter)
    errors = compare(_model(**extra), tmp_path, torch.arange(3, 14), experts=True)
    assert_exact(errors)


def test_mixtral_layers_are_mixtures_and_experts_split(tmp_path):
    model = _model()
    model.save_pretrained(tmp_path)
    mine = load(tmp_path, dtype=torch.float64)
    mlp = mine.layer(0).mlp
    assert isinstance(mlp, MixtureOfExperts) and (len(mlp.experts), mlp.top_k) == (4, 2)
    mu = mine.embed(torch.arange(3, 14))[0]
    parts = mine.split(mu, experts=True)
    assert parts.shape == (2, 1 + 4, 11, 16)
    routed = (parts[:, 1:].abs().sum(-1) > 0).sum(1)  # experts with a term, per token
    assert bool((routed == 2).all())  # exactly k = 2 experts act on every token
    dense = mine.split(mu)
    torch.testing.assert_close(parts[:, 1:].sum(1), dense[:, 1], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_experts_per_tok": 5}, "num_experts_per_tok = 5 experts per token exceeds "
                                     "num_local_experts = 4 experts"),
        ({"num_experts_per_tok": 0}, "num_experts_per_tok must be an integer >= 1; received 0"),
        ({"num_experts_per_tok": "2"}, r"num_experts_per_tok must be an integer; received '2'"),
        ({"num_local_experts": None}, "has no 'num_local_experts', which mixtral models need"),
        ({"num_local_experts": 3}, r"'model.layers.0.block_sparse_moe.gate.weight' has shape "
                                   r"\(4, 16\); the config implies \(3, 16\)"),
    ],
)  # fmt: skip
def test_bad_routing_config_is_refused_naming_the_key(tmp_path, change, message):
    _model().save_pretrained(tmp_path)
    edit_config(tmp_path, **change)
    with pytest.raises(LoadError, match=rf"{tmp_path}: .*{message}"):
        load(tmp_path)


def test_a_missing_expert_is_refused_by_its_tensor_name(tmp_path):
    from safetensors.torch import load_file, save_file

    _model().save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["model.layers.1.block_sparse_moe.experts.3.w2.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LoadError, match=r"'model.layers.1.block_sparse_moe.experts.3.w2.weight' "
                                        r"is missing \(shape \(16, 24\) expected\)"):  # fmt: skip
        load(tmp_path)


def test_expert_split_of_a_dense_model_is_refused(tmp_path):
    config = transformers.LlamaConfig(
        vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=4, max_position_embeddings=32,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    mine = load(tmp_path, dtype=torch.float64)
    with pytest.raises(ValueError, match="layer 0 has a dense MLP"):
        mine.split(mine.embed(torch.arange(3))[0], experts=True)


def test_mixtral_sequence_classification(tmp_path, monkeypatch):
    from transformers.models.mixtral import modeling_mixtral

    float64_router(monkeypatch, modeling_mixtral.MixtralTopKRouter)
    model = _model(head="ForSequenceClassification", num_labels=3, pad_token_id=0)
    compare_classes(model, tmp_path)
