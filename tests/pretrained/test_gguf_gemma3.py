"""Gemma-3 GGUF files through tpde.pretrained.load: a tiny file written with the gguf package
as llama.cpp's converter writes one (norm gains stored as 1 + w, Q8_0 linear weights), against
transformers' own GGUF loader (the oracle, tests only) in float32, and bad files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tpde.pretrained import LoadError, load

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

N = 9
# head_dim 256: the file carries no query_pre_attn_scalar; tpde takes head_dim (llama.cpp's
# rule), transformers its default 256 — equal here as for every Gemma-3 but 27B.
LAYERS, D, HEADS, KV, HEAD_DIM, M, V = 3, 32, 2, 1, 256, 64, 40


def _hf_model():
    """A tiny Gemma-3 with every parameter redrawn (3 layers: with the pattern 6 of the
    gemma3 entry, all local)."""
    torch.manual_seed(3)
    config = transformers.Gemma3TextConfig(
        vocab_size=V, hidden_size=D, intermediate_size=M, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=HEAD_DIM,
        query_pre_attn_scalar=HEAD_DIM, sliding_window=3, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


def _write(path, model, *, drop=(), metadata=None, quantise=True):
    """``model`` as a llama.cpp Gemma-3 GGUF file (names from llama.cpp's TensorNameMap)."""
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, LAYERS)
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_block_count(LAYERS)
    writer.add_context_length(64)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(M)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_freq_base(1e6)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(3)
    writer.add_vocab_size(V)
    for key, (method, value) in (metadata or {}).items():
        getattr(writer, method)(key, value)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied
        stem, part = name.rsplit(".", 1)
        stored = names.get_name(stem) + f".{part}"
        if stored in drop:
            continue
        array = tensor.detach().float().numpy()
        if "norm" in stem:
            writer.add_tensor(stored, array + np.float32(1))  # llama.cpp: gain 1 + w
        elif quantise:
            qtype = gguf.GGMLQuantizationType.Q8_0
            data = gguf.quants.quantize(array, qtype)
            writer.add_tensor(stored, data, raw_shape=data.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(stored, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gemma3-gguf")
    path = _write(folder / "tiny.gguf", _hf_model())
    return folder, path


def test_tiny_gemma3_file_matches_transformers_gguf_loader(tiny):
    folder, path = tiny
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=path.name).eval()
    ids = torch.randint(3, V, (N,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = hf(ids[None], output_hidden_states=True)
    model = load(path)
    assert model.architecture == "gemma3" and model.tokenizer is None
    # 3 layers, pattern 6: all local (window 3), local base 10⁴ — the entry's facts
    assert [layer.attention.window for layer in model.layers] == [3.0, 3.0, 3.0]
    assert {layer.attention.position.base for layer in model.layers} == {1e4}
    states = model.hidden_states(model.embed(ids)[0])
    for l in range(LAYERS):
        expected = out.hidden_states[l][0]
        assert float((states[l] - expected).norm() / expected.norm()) < 1e-5, l
    last = model.final_norm.norm(states[-1])
    assert float((last - out.hidden_states[-1][0]).norm() / out.hidden_states[-1][0].norm()) < 1e-5
    logits = model.logits(states[-1])
    assert float((logits - out.logits[0]).norm() / out.logits[0].norm()) < 1e-5
    assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))


def test_missing_tensor_is_named_by_its_gguf_name(tmp_path):
    path = _write(tmp_path / "t.gguf", _hf_model(), drop=("blk.1.ffn_up.weight",))
    with pytest.raises(LoadError, match=r"'blk\.1\.ffn_up\.weight' \(model\.layers\.1\.mlp"):
        load(path)


def test_metadata_key_tpde_does_not_read_is_refused(tmp_path):
    metadata = {"gemma3.expert_count": ("add_uint32", 4)}
    path = _write(tmp_path / "t.gguf", _hf_model(), metadata=metadata)
    with pytest.raises(LoadError, match=r"'gemma3\.expert_count' = 4 changes the computation"):
        load(path)


def test_unequal_rope_dimension_is_refused(tmp_path):
    metadata = {"gemma3.rope.dimension_count": ("add_uint32", 16)}
    path = _write(tmp_path / "t.gguf", _hf_model(), metadata=metadata)
    with pytest.raises(LoadError, match=r"'gemma3\.rope\.dimension_count' = 16 differs"):
        load(path)


def test_a_quantisation_gguf_cannot_dequantise_is_named(tiny, monkeypatch):
    _, path = tiny

    def refuse(data, qtype):
        raise NotImplementedError(qtype)

    monkeypatch.setattr(gguf.quants, "dequantize", refuse)
    with pytest.raises(
        LoadError, match=r"'token_embd\.weight' is stored as Q8_0, a quantisation type"
    ):
        load(path)


def test_a_truncated_file_is_refused(tiny, tmp_path):
    _, path = tiny
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="truncated"):
        load(cut)


# ---------------------------------------------------------------------- the tokenizer
def test_merges_recovered_from_the_vocabulary_rank_by_place_in_the_file():
    from tpde._io.gguf_tokenizer import recovered_merges

    tokens = ["<pad>", "a", "b", "c", "bc", "ab", "abc"]
    # "bc" (place 4) before "ab" (5); "abc" splits as a|bc and ab|c, the longer left first
    assert recovered_merges(tokens) == [("b", "c"), ("a", "b"), ("ab", "c"), ("a", "bc")]


def test_gemma_tokenizer_of_a_tiny_vocabulary():
    pytest.importorskip("tokenizers")
    from tpde._io.gguf_tokenizer import build_gemma_tokenizer

    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "a", "b", "ab", "▁", "▁ab", "  ", "<x>"]
    types = [3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 4]
    tokenizer = build_gemma_tokenizer(
        {"model": "llama", "tokens": tokens, "token_type": types, "bos_token_id": 2,
         "unknown_token_id": 3, "add_bos_token": True}
    )  # fmt: skip
    # BOS first; "ab" merged; " ab" is "▁ab"; "<x>" kept whole; the two-space token is "▁▁"
    assert tokenizer.encode("ab ab<x>").ids == [2, 6, 8, 10]
    assert tokenizer.get_vocab()["▁▁"] == 9
    with pytest.raises(ValueError, match="tokenizer of type 'gpt2'"):
        build_gemma_tokenizer({"model": "gpt2", "tokens": tokens})
