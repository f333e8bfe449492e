"""A test oracle: a transformers model written as a GGUF file the way llama.cpp's
``convert_hf_to_gguf.py`` writes it (its ``conversion/*.py`` model classes), with gguf-py's
``GGUFWriter``, and the values the file holds read back in the checkpoint's layout.

Per architecture, as the converter does it:

==========  =================================================================================
llama       ``attn_q``/``attn_k`` rows (weights and biases) interleaved per head
            (``LlamaModel.permute``); vocab_size and rope.dimension_count written; a "llama3"
            RoPE scaling becomes ``rope_freqs.weight`` (``generate_extra_tensors``)
olmo3       ``Olmo2Model`` (architecture olmo2): the generic keys, the global layers' RoPE
            scaling, the window; ``attention.sliding_window_pattern`` only where ``pattern``
            is passed (:func:`convert`'s metadata)
gemma       ``GemmaModel``: the common keys, key/value_length, no RoPE base; norm gains
            stored 1 + w; lm_head skipped
gemma2      its own keys: soft-caps and the window, no RoPE base, no query_pre_attn_scalar;
            norm gains stored 1 + w; lm_head skipped
gemma3      the generic keys with its defaults; norm gains 1 + w
phi2        ``Phi2Model``: feed_forward_length 4d, rope.dimension_count = int(f·d)/H, no base
gpt2        ``GPT2Model``: the Conv1D weights transposed to (out, in); feed_forward_length 4d
gptneox     ``GPTNeoXModel``: the fused QKV rewritten from head by head to [W_q; W_k; W_v]
phi3        ``Phi3MiniModel``: its own keys (rope.dimension_count = int(f·d)/H, C₀, the window,
            0 for none); LongRoPE's factors as two float32 tensors, α as attn_factor
stablelm    ``StableLMModel``: rope.dimension_count = int(f·d/H), use_parallel_residual, no
            base; each layer's per-head QK-norm gains stacked into one (H, d_h) tensor (F32)
falcon      ``FalconModel``: context 2048, feed_forward_length 4d, tensor_data_layout
            "jploski": the fused QKV rewritten from group by group to [W_q; W_k; W_v] with
            H_kv = num_kv_heads, 1 where config.json has none (Falcon-7B's multi-query)
any other   the generic ``TextModel.set_gguf_parameters`` keys; tensors renamed only (qwen2,
            qwen3, olmo2, starcoder2: a family whose converter class adds nothing needs no
            line here, its architecture the one its GGUF case names, :func:`architectures`)
==========  =================================================================================

Matrices (2-D) are stored in ``qtype`` where their rows fill whole blocks (F32 otherwise,
as the converter falls back), vectors in F32. :func:`convert` returns the state dict the
file stands for: each tensor quantised and dequantised in the file's layout, then put back
in the checkpoint's (the inverse permutation or transposition, by index arrays), so that a
folder of those values is the file's model exactly.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import torch

gguf = __import__("pytest").importorskip("gguf")

#: config.json model_type → the architecture llama.cpp's converter writes it as, where the
#: converter class that registers its Hugging Face class is another family's
#: (``ModelBase.register`` in ``convert_hf_to_gguf.py``): ``LlamaModel`` registers
#: ``MistralForCausalLM``, ``Olmo2Model`` ``Olmo3ForCausalLM``. The converter's data, as the
#: GGUF cases' architectures are: a test holds each equal to the GGUF map whose ``windowed``
#: values read such a file (llama's Mistral, olmo2's OLMo-3).
REGISTERED_WITH = {"mistral": "llama", "olmo3": "olmo2"}
_GEMMA = ("gemma", "gemma2", "gemma3")


@functools.cache
def architectures() -> dict:
    """config.json model_type → the llama.cpp architecture the converter writes: each GGUF
    case's (``GGUF_CASES`` of the folder tests, :mod:`tests.pretrained.gguf_cases`: its config
    class's ``model_type`` → the architecture the case names) and :data:`REGISTERED_WITH`.
    The test's own data, never tpde's ``GGUFMap.architecture`` (which a test holds equal to
    it). Built on first use, so that the folder tests may import this module."""
    import transformers

    from tests.pretrained.gguf_cases import base_cases

    out = dict(REGISTERED_WITH)
    for config_cls, _, _, architecture in base_cases().cases.values():
        out[getattr(transformers, config_cls).model_type] = architecture
    return out


def architecture(model_type: str) -> str:
    """The architecture llama.cpp's converter writes a model of ``model_type`` as
    (:func:`architectures`); a KeyError naming it where no case declares one."""
    table = architectures()
    if model_type not in table:
        raise KeyError(
            f"no GGUF case writes model_type {model_type!r} (the cases write "
            f"{', '.join(sorted(table))}); declare its family's case in its folder test's "
            "GGUF_CASES, with llama.cpp's architecture name."
        )
    return table[model_type]


def _rotary_rows(rows: int, heads: int) -> np.ndarray:
    """The row order of ``LlamaModel.permute``: file row r is checkpoint row order[r]."""
    index = np.arange(rows)
    return index.reshape(heads, 2, rows // heads // 2).swapaxes(1, 2).reshape(rows)


def _qkv_blocks_rows(rows: int, heads: int, kv: int | None = None) -> np.ndarray:
    """GPTNeoXModel's and FalconModel's rewrite: file rows [Q; K; V] from the checkpoint's
    rows group by group ([q_{g,1} … q_{g,r}; k_g; v_g], r = H/H_kv; GPT-NeoX: H_kv = H)."""
    kv = heads if kv is None else kv
    index = np.arange(rows).reshape(kv, heads // kv + 2, rows // (heads + 2 * kv))
    return np.concatenate([index[:, :-2].reshape(-1), index[:, -2].reshape(-1),
                           index[:, -1].reshape(-1)])  # fmt: skip


def falcon_kv_heads(g: dict) -> int:
    """The H_kv FalconModel writes: config.json's num_kv_heads, 1 where it has none (Falcon-7B's
    multi-query; transformers' FalconConfig writes H there, which the converter cannot split)."""
    if g["multi_query"] and not g["new_decoder_architecture"]:
        return 1
    return g["num_kv_heads"]


def _metadata(writer, cfg, arch: str) -> None:
    """The keys the converter of ``arch`` writes for config ``cfg``."""
    g = cfg.to_dict()
    params = g.get("rope_parameters") or {}
    params = params.get("full_attention", params)
    if arch == "falcon":
        writer.add_context_length(2048)  # not in config.json
        writer.add_tensor_data_layout("jploski")
        writer.add_embedding_length(g["hidden_size"])
        writer.add_feed_forward_length(4 * g["hidden_size"])
        writer.add_block_count(g["num_hidden_layers"])
        writer.add_head_count(g["num_attention_heads"])
        writer.add_head_count_kv(falcon_kv_heads(g))
        writer.add_layer_norm_eps(g["layer_norm_epsilon"])
        return
    if arch == "gpt2":
        writer.add_block_count(g["n_layer"])
        writer.add_context_length(g["n_positions"])
        writer.add_embedding_length(g["n_embd"])
        writer.add_feed_forward_length(4 * g["n_embd"])
        writer.add_head_count(g["n_head"])
        writer.add_layer_norm_eps(g["layer_norm_epsilon"])
        return
    d, heads = g["hidden_size"], g["num_attention_heads"]
    writer.add_block_count(g["num_hidden_layers"])
    writer.add_context_length(g["max_position_embeddings"])
    writer.add_embedding_length(d)
    writer.add_head_count(heads)
    if arch == "phi2":
        writer.add_feed_forward_length(4 * d)
        writer.add_head_count_kv(heads)
        writer.add_layer_norm_eps(g["layer_norm_eps"])
        writer.add_rope_dimension_count(int(params["partial_rotary_factor"] * d) // heads)
        return
    writer.add_feed_forward_length(g["intermediate_size"])
    if arch == "phi3":
        _phi3(writer, g, params)
        return
    if arch == "stablelm":
        rotary = params.get("partial_rotary_factor", g.get("partial_rotary_factor"))
        writer.add_rope_dimension_count(int(rotary * (d // heads)))
        writer.add_head_count_kv(g["num_key_value_heads"])
        writer.add_parallel_residual(g["use_parallel_residual"])
        writer.add_layer_norm_eps(g["layer_norm_eps"])
        return
    if arch == "gptneox":
        writer.add_rope_dimension_count(int(params["partial_rotary_factor"] * (d // heads)))
        writer.add_parallel_residual(g.get("use_parallel_residual", True))
        writer.add_layer_norm_eps(g["layer_norm_eps"])
        return
    writer.add_head_count_kv(g["num_key_value_heads"])
    if arch == "gemma":  # GemmaModel: no RoPE base (llama.cpp's default 10⁴, Gemma's)
        writer.add_layer_norm_rms_eps(g["rms_norm_eps"])
        writer.add_key_length(g["head_dim"])
        writer.add_value_length(g["head_dim"])
        return
    if arch == "gemma2":
        writer.add_layer_norm_rms_eps(g["rms_norm_eps"])
        writer.add_key_length(g["head_dim"])
        writer.add_value_length(g["head_dim"])
        writer.add_attn_logit_softcapping(g["attn_logit_softcapping"])
        writer.add_final_logit_softcapping(g["final_logit_softcapping"])
        writer.add_sliding_window(g["sliding_window"])
        return
    _rope_scaling(writer, params)
    writer.add_rope_freq_base(params["rope_theta"])
    if "rms_norm_eps" in g:
        writer.add_layer_norm_rms_eps(g["rms_norm_eps"])
    if "norm_epsilon" in g:
        writer.add_layer_norm_eps(g["norm_epsilon"])
    if g.get("head_dim") is not None:
        writer.add_key_length(g["head_dim"])
        writer.add_value_length(g["head_dim"])
    if arch == "llama":
        writer.add_vocab_size(g["vocab_size"])
        writer.add_rope_dimension_count(g.get("head_dim") or d // heads)
    if cfg.model_type == "olmo3" and g.get("sliding_window"):
        writer.add_sliding_window(g["sliding_window"])
    if arch == "gemma3" and g.get("sliding_window"):
        writer.add_sliding_window(g["sliding_window"])


def phi3_attention_factor(g: dict) -> float:
    """``Phi3MiniModel.generate_extra_tensors``' α = √(1 + ln s/ln C₀), s = C/C₀ (1 for s ≤ 1)."""
    scale = g["max_position_embeddings"] / g["original_max_position_embeddings"]
    original = g["original_max_position_embeddings"]
    return math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0


def _phi3(writer, g: dict, params: dict) -> None:
    """``Phi3MiniModel.set_gguf_parameters`` (after the common keys), and α with LongRoPE."""
    d, heads = g["hidden_size"], g["num_attention_heads"]
    writer.add_rope_scaling_orig_ctx_len(g["original_max_position_embeddings"])
    writer.add_head_count_kv(g["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(g["rms_norm_eps"])
    writer.add_rope_dimension_count(int(params.get("partial_rotary_factor", 1.0) * d) // heads)
    writer.add_rope_freq_base(params["rope_theta"])
    writer.add_sliding_window(g.get("sliding_window") or 0)  # 0: none (Phi-4)
    if params.get("long_factor"):
        writer.add_rope_scaling_attn_factors(phi3_attention_factor(g))


def _rope_scaling(writer, params: dict) -> None:
    """``TextModel.set_gguf_parameters``' RoPE scaling keys (llama3: a tensor instead)."""
    kind = params.get("rope_type")
    if kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(params["factor"])
    elif kind == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(params["factor"])
        writer.add_rope_scaling_orig_ctx_len(params["original_max_position_embeddings"])
        for key in ("beta_fast", "beta_slow"):
            if params.get(key) is not None:
                getattr(writer, f"add_rope_scaling_yarn_{key}")(params[key])


def llama3_rope_freqs(cfg) -> np.ndarray:
    """``LlamaModel.generate_extra_tensors``: the divisors f_m of a "llama3" scaling, in the
    converter's float32 arithmetic."""
    p = cfg.rope_parameters
    dim = cfg.head_dim
    freqs = 1.0 / (p["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    old = p["original_max_position_embeddings"]
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32).numpy()


def _layout(name: str, array: np.ndarray, cfg, arch: str):
    """(the array as the file stores it, a function mapping such an array back)."""
    g = cfg.to_dict()
    stem = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else name
    if arch == "llama" and stem in ("q_proj", "k_proj"):
        heads = g["num_attention_heads"] if stem == "q_proj" else g["num_key_value_heads"]
        order = _rotary_rows(array.shape[0], heads)
    elif arch == "gptneox" and stem == "query_key_value":
        order = _qkv_blocks_rows(array.shape[0], g["num_attention_heads"])
    elif arch == "falcon" and stem == "query_key_value":
        order = _qkv_blocks_rows(array.shape[0], g["num_attention_heads"], falcon_kv_heads(g))
    elif arch == "gpt2" and stem in ("c_attn", "c_proj", "c_fc") and array.ndim == 2:
        return array.T, lambda stored: stored.T
    else:
        return array, lambda stored: stored

    def back(stored, order=order):
        out = np.empty_like(stored)
        out[order] = stored
        return out

    return array[order], back


_HEAD_NORM = re.compile(r"^(.*\.[qk]_layernorm)\.norms\.(\d+)\.weight$")


def _entries(state: dict, arch: str):
    """(checkpoint name, float32 array, the per-head names it stacks or None) of the tensors
    the converter writes: StableLM's per-head QK-norm gains stacked (``_stack_qk_norm``) into
    one (H, d_h) tensor named ``….q_layernorm.weight``."""
    stacks: dict = {}
    for name in state:
        match = _HEAD_NORM.match(name) if arch == "stablelm" else None
        if match:
            stacks.setdefault(match[1], {})[int(match[2])] = name
    for name, tensor in state.items():
        match = _HEAD_NORM.match(name) if arch == "stablelm" else None
        if match and int(match[2]) == 0:
            heads = [stacks[match[1]][h] for h in range(len(stacks[match[1]]))]
            yield f"{match[1]}.weight", np.stack([state[n] for n in heads]), heads
        elif not match:
            yield name, tensor, None


def _encode(array: np.ndarray, qtype: str):
    """(data, raw dtype or None) of ``array`` stored in ``qtype`` where it fills blocks."""
    kind = gguf.GGMLQuantizationType[qtype]
    block = gguf.GGML_QUANT_SIZES[kind][0]
    if array.ndim != 2 or qtype == "F32" or array.shape[-1] % block:
        return array, None
    if qtype == "F16":
        return array.astype(np.float16), None
    return gguf.quants.quantize(array, kind), kind


def _decode(data, kind) -> np.ndarray:
    if kind is None:
        return np.asarray(data, dtype=np.float32)
    return gguf.quants.dequantize(data, kind).astype(np.float32)


def _vocabulary(writer, cfg, arch: str) -> None:
    """A vocabulary of the model's size, as the converter always writes one (transformers'
    GGUF loader takes the vocabulary size from it): a GPT-2 byte-level BPE of tokens "a",
    "b", "ab", "<3>", …; Gemma's (SentencePiece) stands here as ``<arch>.vocab_size``."""
    if arch in _GEMMA:
        writer.add_vocab_size(cfg.vocab_size)
        return
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(["a", "b", "ab", *(f"<{i}>" for i in range(3, cfg.vocab_size))])
    writer.add_token_types([1] * cfg.vocab_size)
    writer.add_token_merges(["a b"])
    if arch == "phi3":  # its config's pad id (32000 by default) must lie in the vocabulary
        writer.add_pad_token_id(0)


def convert(model, path, qtype: str = "F32", *, metadata=None, tensors=None, drop=(),
            vocabulary=False, unset=()) -> dict:  # fmt: skip
    """Write ``model`` (a transformers causal LM) to ``path`` as llama.cpp's converter writes
    it (module table), matrices in ``qtype`` (F32, F16, Q8_0, Q4_0, …).

    ``metadata``: key → (GGUFWriter method, value) written after the converter's keys;
    ``tensors``: name → array (or (raw bytes, ggml type)) written beside the model's (after
    them, in order); ``drop``: file tensor names left
    out; ``vocabulary``: write one (:func:`_vocabulary`); ``unset``: the converter's metadata
    keys left out. Returns the checkpoint-named state
    dict (float32 tensors) the file holds.
    """
    cfg = model.config
    arch = architecture(cfg.model_type)
    names = gguf.get_tensor_name_map(
        {n: a for a, n in gguf.MODEL_ARCH_NAMES.items()}[arch],
        getattr(cfg, "num_hidden_layers", None) or cfg.n_layer,
    )
    writer = gguf.GGUFWriter(str(path), arch)
    _metadata(writer, cfg, arch)
    if vocabulary:
        _vocabulary(writer, cfg, arch)
    for key, (method, value) in (metadata or {}).items():
        getattr(writer, method)(key, value)
    for key in unset:
        del writer.kv_data[0][key]
    held = {}
    state = {n: t.detach().to(torch.float32).numpy() for n, t in model.state_dict().items()}
    for name, array, heads in _entries(state, arch):
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue  # GPT-2's causal-mask buffers: not written
        if name == "lm_head.weight" and (cfg.tie_word_embeddings or arch in ("gemma", "gemma2")):
            continue
        stem, part = name.rsplit(".", 1)
        if names.get_name(stem) is None:
            raise ValueError(
                f"gguf-py's tensor names of {arch!r} files have none for {name!r}: the "
                "architecture is not this model's (its GGUF case names llama.cpp's)."
            )
        stored = f"{names.get_name(stem)}.{part}"
        if arch in _GEMMA and stem.endswith("norm"):
            array = array + np.float32(1)  # the converter: gain 1 + w
        array, back = _layout(name, array, cfg, arch)
        data, kind = _encode(array, "F32" if stored.endswith("_norm.weight") else qtype)
        value = back(_decode(data, kind))
        if arch in _GEMMA and stem.endswith("norm"):
            value = value - np.float32(1)
        for each, row in zip(heads, value, strict=True) if heads else [(name, value)]:
            held[each] = torch.from_numpy(np.ascontiguousarray(row))
        if stored in drop:
            continue
        if kind is None:
            writer.add_tensor(stored, data)
        else:
            writer.add_tensor(stored, data, raw_shape=data.shape, raw_dtype=kind)
    if arch == "llama" and (cfg.rope_parameters or {}).get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_rope_freqs(cfg))
    params = getattr(cfg, "rope_parameters", None) or {}
    if arch == "phi3" and params.get("long_factor"):
        for kind in ("long", "short"):
            factors = np.asarray(params[f"{kind}_factor"], dtype=np.float32)
            if f"rope_factors_{kind}.weight" not in drop:
                writer.add_tensor(f"rope_factors_{kind}.weight", factors)
    for name, array in (tensors or {}).items():
        if isinstance(array, tuple):  # (raw bytes (rows, bytes per row), ggml type)
            writer.add_tensor(name, array[0], raw_shape=array[0].shape, raw_dtype=array[1])
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return held
