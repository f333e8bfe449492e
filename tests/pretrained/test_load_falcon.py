"""Falcon (tpde/pretrained/families/falcon.py) against transformers: its three attention
layouts (grouped by new_decoder_architecture, multi-query, per head), parallel and
sequential blocks, one or two norms, RoPE or ALiBi (the bias in bfloat16, before the scaling)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.pretrained.family_oracle import (
    assert_exact,
    compare,
    compare_classes,
    edit_config,
    redraw,
)
from tpde.fields import ALiBi, Parallel
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")

#: family → its GGUF case (config class, config, model class, llama.cpp's architecture;
#: tests/pretrained/gguf_cases.py):
#: multi-query (Falcon-7B's layout, the one transformers' GGUF loader builds).
GGUF_CASES = {
    "falcon": ("FalconConfig", {"vocab_size": 40, "num_hidden_layers": 2, "hidden_size": 32,
                                "num_attention_heads": 4, "bos_token_id": 0, "eos_token_id": 0},
               "FalconForCausalLM", "falcon"),
}  # fmt: skip

CASES = {
    "grouped, two norms": {"new_decoder_architecture": True, "num_kv_heads": 2, "bias": True},
    "grouped, one norm": {"new_decoder_architecture": True, "num_kv_heads": 2,
                          "num_ln_in_parallel_attn": 1},
    "multi-query, parallel": {"multi_query": True},
    "multi-query, sequential": {"multi_query": True, "parallel_attn": False, "bias": True},
    "per head, ALiBi": {"multi_query": False, "alibi": True, "bias": True},
    "multi-query, ALiBi, sequential": {"alibi": True, "parallel_attn": False},
}  # fmt: skip


def _model(seed: int = 7, heads: int = 4, head: str = "ForCausalLM", **extra):
    config = transformers.FalconConfig(
        vocab_size=40, hidden_size=8 * heads, num_hidden_layers=2, num_attention_heads=heads,
        max_position_embeddings=400, **extra,
    )  # fmt: skip
    model = redraw(getattr(transformers, f"Falcon{head}")(config), seed)
    model.set_attn_implementation("sdpa")  # eager casts the scores to float32 for the softmax
    return model


@pytest.mark.parametrize("case", list(CASES))
def test_falcon_equals_transformers(tmp_path, case):
    assert_exact(compare(_model(**CASES[case]), tmp_path, torch.arange(3, 14)))
    layer = load(tmp_path, dtype=torch.float64).layer(0)
    parallel = CASES[case].get("parallel_attn", True)
    assert isinstance(layer.field.parts[0], Parallel) is parallel
    if CASES[case].get("alibi"):
        assert layer.attention.position == ALiBi(rounding="bfloat16", scale=1 / math.sqrt(8))


def test_falcon_alibi_far_out_with_32_heads(tmp_path):
    """Falcon-RW's 32 heads: slopes 2^{−h/4}, most not representable in bfloat16, and 300
    positions, where bfloat16 rounds m_h p_j: tpde forms the bias as Falcon's code does."""
    model = _model(seed=8, heads=32, multi_query=False, alibi=True)
    assert_exact(compare(model, tmp_path, torch.arange(300) % 40))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"new_decoder_architecture": True, "parallel_attn": False},
         "new_decoder_architecture = true with parallel_attn = false"),
        ({"num_ln_in_parallel_attn": 2}, "num_ln_in_parallel_attn = 2 with "
                                         "new_decoder_architecture = false"),
        ({"multi_query": False, "num_kv_heads": 2}, "num_kv_heads = 2 differs from "
                                                    "num_attention_heads = 4"),
        ({"alibi": "no"}, "alibi must be true or false; received 'no'"),
        # typed as FalconConfig types them, in every layout (here multi-query, which reads
        # neither)
        ({"num_kv_heads": "two"}, "num_kv_heads must be an integer; received 'two'"),
        ({"num_ln_in_parallel_attn": 1.5}, "num_ln_in_parallel_attn must be an integer; "
                                           "received 1.5"),
    ],
)  # fmt: skip
def test_falcon_refusals_name_the_keys(tmp_path, change, message):
    _model().save_pretrained(tmp_path)
    edit_config(tmp_path, **change)
    with pytest.raises(LoadError, match=rf"{tmp_path}.*{message}"):
        load(tmp_path)


def test_falcon_sequence_classification(tmp_path):
    model = _model(head="ForSequenceClassification", num_labels=3, pad_token_id=0)
    compare_classes(model, tmp_path)
