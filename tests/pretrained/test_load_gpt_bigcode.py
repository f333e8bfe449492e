"""GPT-BigCode (tpde/pretrained/families/gpt_bigcode.py) against transformers: multi-query
attention (one key/value head) and its multi-head layout, learned positions."""

from __future__ import annotations

import pytest
import torch

from tests.pretrained.family_oracle import (
    assert_exact,
    compare,
    compare_classes,
    edit_config,
    redraw,
)
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")


def _model(multi_query: bool, seed: int = 5, head: str = "ForCausalLM", **extra):
    config = transformers.GPTBigCodeConfig(
        vocab_size=40, n_embd=16, n_layer=2, n_head=4, n_positions=32, multi_query=multi_query,
        bos_token_id=0, eos_token_id=0, **extra,
    )  # fmt: skip
    return redraw(getattr(transformers, f"GPTBigCode{head}")(config), seed)


@pytest.mark.parametrize("multi_query", [True, False])
def test_gpt_bigcode_equals_transformers(tmp_path, multi_query):
    assert_exact(compare(_model(multi_query), tmp_path, torch.arange(3, 14)))
    attention = load(tmp_path, dtype=torch.float64).layer(0).attention
    assert (attention.heads, attention.kv_heads) == (4, 1 if multi_query else 4)


def test_gpt_bigcode_refusals(tmp_path):
    _model(True).save_pretrained(tmp_path)
    edit_config(tmp_path, multi_query="yes")
    with pytest.raises(LoadError, match="multi_query must be true or false; received 'yes'"):
        load(tmp_path)
    edit_config(tmp_path, multi_query=False)  # the stored c_attn has H·d_h + 2·d_h rows
    with pytest.raises(LoadError, match=r"c_attn.weight' has shape \(24, 16\).*\(48, 16\)"):
        load(tmp_path)


def test_gpt_bigcode_sequence_classification(tmp_path):
    model = _model(True, head="ForSequenceClassification", num_labels=3, pad_token_id=0)
    compare_classes(model, tmp_path)
