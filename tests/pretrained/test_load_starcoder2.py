"""StarCoder2 (one family file, tpde/pretrained/families/starcoder2.py) against transformers."""

from __future__ import annotations

import pytest
import torch

from tests.pretrained.gguf_cases import SMALL
from tests.pretrained.test_load import _exact_float64, _relative
from tpde.pretrained import load

transformers = pytest.importorskip("transformers")

#: family → its GGUF case (config class, config, model class, llama.cpp's architecture;
#: tests/pretrained/gguf_cases.py).
GGUF_CASES = {
    "starcoder2": (
        "Starcoder2Config",
        {**SMALL, "sliding_window": None},
        "Starcoder2ForCausalLM",
        "starcoder2",
    ),
}


@pytest.mark.parametrize("window", [None, 3])
def test_starcoder2_equals_transformers(tmp_path, window):
    torch.manual_seed(7)
    config = transformers.Starcoder2Config(
        vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        sliding_window=window, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = transformers.Starcoder2ForCausalLM(config).to(torch.float64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    _exact_float64(model)
    model.save_pretrained(tmp_path)
    ids = torch.arange(3, 12)
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    mine = load(tmp_path, dtype=torch.float64)
    states = mine.hidden_states(mine.embed(ids)[0])
    for l, expected in enumerate(out.hidden_states[:-1]):
        assert _relative(states[l], expected[0]) < 1e-12, l
    last = mine.final_norm.norm(states[-1])
    assert _relative(last, out.hidden_states[-1][0]) < 1e-12
    assert _relative(mine.logits(states[-1]), out.logits[0]) < 1e-12
