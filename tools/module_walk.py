"""Count the modules of ``tpde.pretrained`` that ``load(path)`` walks through (issue 34), and
list the ``tpde._io`` modules (the GGUF format readers) it enters.

    .venv/bin/python tools/module_walk.py [--all]

A tiny llama checkpoint is written twice, as a Hugging Face folder (config.json and
model.safetensors, written with safetensors) and as a GGUF file (written with gguf's
GGUFWriter, with a BPE vocabulary), and a tiny Gemma-3 checkpoint as a GGUF file (no
vocabulary; names from gguf-py's TensorNameMap), tiny Phi-3 and Falcon folders
(:func:`tpde.pretrained.random_models.random_checkpoint`; Falcon's a family entry with code,
its layout ``variant``), and each is loaded with ``sys.setprofile`` recording every Python
function call whose code lives in ``tpde/pretrained`` or ``tpde/_io``. Three counts of the
``tpde/pretrained`` modules, per path, and a second column:

- **modules**: the distinct ``tpde/pretrained`` modules (files) whose functions run;
- **returns**: the calls into a module that is already on the call stack below a call into
  another module (A → B → A: a parameter that came back to a module it had left);
- **revisits**: in the sequence of the modules of every call (repeats in a row merged), the
  entries into a module that an earlier call had already entered and left (loader →
  _folder → loader → _build counts one: the loader's own second call). This is the stricter
  count: an orchestrator calling its own helpers between stages counts.

- **_io**: the distinct ``tpde/_io`` modules whose functions run (``gguf_file``,
  ``gguf_layouts``, ``gguf_tokenizer``), listed after ``|``: the GGUF container, tokenizer
  and converter-layout code a GGUF path enters, which the three counts leave out (nothing
  of the road hidden by where a file lies).

Stack unwinding (B returning its value to A) is not a return in either sense. The walk (the
modules in the order first entered) is printed too. Calls into ``tpde.fields``,
``tpde._validation`` and the libraries are not counted: the count is of the loader's own
layout. Returns and revisits are of ``tpde/pretrained`` modules only (a call into
``tpde/_io`` leaves the sequence unchanged).

Measured with this script on the branch ``road`` and on its parent (issue 34): llama folder
4 modules, 0 returns, 12 revisits (was 6, 0, 26); llama GGUF 5, 0, 12 (was 6, 0, 45; the
fifth module is the BPE tokenizer builder, absent for a file without a vocabulary);
Gemma-3 GGUF 4, 0, 12 (was 9, 0, 82). After the GGUF round (branch ``gguf``: the container
check, the RoPE-frequency reader and the families' own GGUF hooks in their own files): llama
folder 4, 0, 13; llama GGUF 7, 0, 15 (loader, _gguf, _gguf_container, _gguf_rope, _config,
_build, _bpe); Gemma-3 GGUF 7, 0, 15 (families/gemma2 in place of _bpe). With the layout
reversals of branch ``gguf2`` in ``_gguf_layout``: llama GGUF 8, 0, 24; Gemma-3 GGUF 7, 0, 17.
Still no return to a module left; the GGUF stage is now four files instead of one.

Branch ``ggufroad``: the GGUF container and dequantisation (``tpde._io.gguf_file``) and the
tokenizer builders (``tpde._io.gguf_tokenizer``) are file-format readers outside
``tpde/pretrained`` — what safetensors and tokenizers are for a folder, not counted, as those
are not —, and the translation is two modules: ``_gguf`` (the tensors: names, layouts, RoPE
tensors) and ``_gguf_keys`` (the metadata as the config.json, windows and RoPE scaling); in
one it would be ~830 lines (510 of code), over the 600-line limit. llama folder 4, 0, 13;
llama GGUF 5, 0, 16 (loader, _gguf, _gguf_keys, _config, _build); Gemma-3 GGUF 6, 0, 17
(families/gemma2 after _gguf_keys: the family entry's llama.cpp query scale, a function of
the family's module, as a Falcon folder enters families/falcon for its variant: 5, 0, 14 —
the road's "one family entry", counted by this tool's rule wherever the entry has code).

Branch ``walk4``: the translator is one module, ``_gguf`` (585 lines): ``_gguf_keys`` merged
into it, and llama.cpp's conventions that no family chooses moved beside the other GGUF
format readers (``tpde._io.gguf_layouts``: the converter's interleaved rotary rows, QKV
blocks and stacked norms undone, 96 lines; ``tpde._io.gguf_rope``: the ``rope.scaling.*``
keys and RoPE tensors in transformers' ``rope_scaling`` spelling, 222 lines) — moved, not
shortened: the GGUF code is as long as before, in three files, one of them counted. Gemma's
llama.cpp query scale is data (``GGUFMap.derived`` rules, read by ``_gguf``), not a function
of ``families/gemma2``. llama folder 4, 0, 13; llama GGUF 4, 0, 13 (loader, _gguf, _config,
_build); Gemma-3 GGUF 4, 0, 13; Phi-3 folder 4, 0, 13; Falcon folder 5, 0, 14 (its
``variant`` is code: the layout keys checked and combined). ``--all`` (needs transformers and
the checkout's tests/): every family's random folder 4, 0, 13 but albert (5, 0, 16:
``transformer.py``, the Transformer stage, for its shared layer groups) and the three whose
entry has a ``variant`` (bloom, falcon, gpt_bigcode: 5, 0, 14, the family module between
_config and _build); every GGUF case of ``tests/pretrained/test_gguf_converted.py`` 4, 0,
13 (gemma3: 4, 0, 15) but olmo2 (5, 0, 14: ``families/olmo2``, whose ``computed`` functions
read OLMo-3's layers and local RoPE from a file holding a window) and falcon's four (5, 0,
16: ``families/falcon``'s variant, before _config). No path returns to a module it left.

Branch ``walk5`` (a review of walk4: the move to ``tpde._io`` had lowered the count without
shortening the road): the RoPE-scaling spelling is translator logic and back in
``tpde/pretrained`` (``_gguf_rope``, 254 lines; ``_gguf`` 570), counted; Gemma's query scale
is a ``computed`` function of ``families/gemma2`` again (one mechanism beside OLMo-2's, no
rule language), counted; the converter's row layouts stay in ``tpde._io`` (array operations
naming no family), listed in the new ``_io`` column with the container and tokenizer
readers. Counts (modules + _io, returns, revisits): llama folder 4 + 0, 0, 13 (unchanged);
llama GGUF 5 + 3, 0, 18 (was 4, 0, 13: loader, _gguf, _gguf_rope, _config, _build | gguf_file,
gguf_layouts, gguf_tokenizer); Gemma-3 GGUF 6 + 2, 0, 18 (was 4, 0, 13: families/gemma2 after
_gguf_rope | gguf_file, gguf_tokenizer — its tokenizer function runs and returns None for a
file without a vocabulary); Phi-3 folder 4 + 0, 0, 13; Falcon folder 5 + 0, 0, 14. ``--all``:
every folder as before, no ``_io`` module (albert 5, 0, 16; bloom, falcon, gpt_bigcode 5, 0,
14; the others 4, 0, 13); every GGUF case 5 modules, 0 returns, 18 revisits but gemma2 and
olmo2 (6, 0, 18: families/gemma2, families/olmo2), gemma3 (6, 0, 20) and falcon's four (6, 0,
20: families/falcon); ``_io`` 3 (gguf_file, gguf_layouts, gguf_tokenizer) for llama,
llama-tied, gpt_neox, gpt_neox-sequential, stablelm-qk-parallel and falcon's four (the
converter's rotary rows, QKV blocks or stacked norms), else 2. No path returns to a module it
left; the revisits rise by 4 or 5 on every GGUF path (_gguf → _gguf_rope and back, three
times: which RoPE tensors, their values, the scaling).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

D, H, HKV, M, V, L = 8, 2, 1, 12, 5, 2


def _weights(rng) -> dict[str, np.ndarray]:
    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    out = {"model.embed_tokens.weight": w(V, D), "model.norm.weight": w(D),
           "lm_head.weight": w(V, D)}  # fmt: skip
    for l in range(L):
        p = f"model.layers.{l}."
        out |= {
            p + "input_layernorm.weight": w(D),
            p + "self_attn.q_proj.weight": w(H * D // H, D),
            p + "self_attn.k_proj.weight": w(HKV * D // H, D),
            p + "self_attn.v_proj.weight": w(HKV * D // H, D),
            p + "self_attn.o_proj.weight": w(D, D),
            p + "post_attention_layernorm.weight": w(D),
            p + "mlp.gate_proj.weight": w(M, D),
            p + "mlp.up_proj.weight": w(M, D),
            p + "mlp.down_proj.weight": w(D, M),
        }
    return out


def write_folder(folder: Path) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "llama", "hidden_size": D, "num_hidden_layers": L,
              "num_attention_heads": H, "num_key_value_heads": HKV, "intermediate_size": M,
              "vocab_size": V, "max_position_embeddings": 16, "rms_norm_eps": 1e-5,
              "rope_theta": 500.0, "tie_word_embeddings": False}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    save_file(_weights(np.random.default_rng(0)), str(folder / "model.safetensors"))


_GGUF = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output",
         "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
         "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down"}  # fmt: skip


def write_gguf(path: Path) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(L)
    writer.add_context_length(16)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(M)
    writer.add_head_count(H)
    writer.add_head_count_kv(HKV)
    writer.add_rope_freq_base(500.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(V)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(["<s>", "a", "b", "ab", "Ġ"])
    writer.add_token_types([3, 1, 1, 1, 1])
    writer.add_token_merges(["a b"])
    for name, array in _weights(np.random.default_rng(0)).items():
        stem = name.removesuffix(".weight")
        if stem.startswith("model.layers."):
            _, _, l, rest = stem.split(".", 3)
            stem = f"blk.{l}.{_GGUF[rest]}"
        else:
            stem = _GGUF[stem]
        writer.add_tensor(stem + ".weight", array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_gemma3_gguf(path: Path) -> None:
    """A tiny Gemma-3 GGUF file (2 layers, d = 16, 2 heads and 1 key/value head of 8)."""
    import gguf

    rng, k = np.random.default_rng(1), 8
    shapes = {"model.embed_tokens": (V, D), "model.norm": (D,)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes |= {p + "self_attn.q_proj": (H * k, D), p + "self_attn.k_proj": (HKV * k, D),
                   p + "self_attn.v_proj": (HKV * k, D), p + "self_attn.o_proj": (D, H * k),
                   p + "self_attn.q_norm": (k,), p + "self_attn.k_norm": (k,),
                   p + "mlp.gate_proj": (M, D), p + "mlp.up_proj": (M, D),
                   p + "mlp.down_proj": (D, M)}  # fmt: skip
        for norm in ("input_layernorm", "post_attention_layernorm",
                     "pre_feedforward_layernorm", "post_feedforward_layernorm"):  # fmt: skip
            shapes[p + norm] = (D,)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, L)
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_block_count(L)
    writer.add_context_length(16)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(M)
    writer.add_head_count(H)
    writer.add_head_count_kv(HKV)
    writer.add_key_length(k)
    writer.add_value_length(k)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e6)
    writer.add_sliding_window(3)
    writer.add_vocab_size(V)
    for stem, shape in shapes.items():
        writer.add_tensor(f"{names.get_name(stem)}.weight", rng.standard_normal(shape, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def walk(path: Path) -> tuple[list[str], int, int, list[str]]:
    """(``tpde/pretrained`` modules in the order first entered, returns, revisits, the
    ``tpde/_io`` modules entered, in that order) of ``load(path)`` (module notes)."""
    import tpde._io
    import tpde.pretrained

    roots = {
        "pretrained": str(Path(tpde.pretrained.__file__).parent),
        "_io": str(Path(tpde._io.__file__).parent),
    }
    stack: list[str | None] = []
    order: list[str] = []
    io: list[str] = []
    sequence: list[str] = []
    returns = 0

    def profile(frame, event, arg):
        nonlocal returns
        if event == "call":
            file = frame.f_code.co_filename
            module = _under(file, roots["pretrained"])
            entered = _under(file, roots["_io"])
            if entered is not None and entered not in io:
                io.append(entered)
            if module is not None:
                if module not in order:
                    order.append(module)
                if not sequence or sequence[-1] != module:
                    sequence.append(module)
                mine = [m for m in stack if m is not None]
                if mine and mine[-1] != module and module in mine:
                    returns += 1
            stack.append(module)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        tpde.pretrained.load(path, dtype=torch.float64)
    finally:
        sys.setprofile(None)
    revisits = sum(module in sequence[:i] for i, module in enumerate(sequence))
    return order, returns, revisits, io


def _under(file: str, root: str) -> str | None:
    """``file``'s path below the folder ``root``, or None where it lies elsewhere."""
    return file[len(root) + 1 :] if file.startswith(root + "/") else None


def main() -> None:
    import tpde.pretrained
    from tpde.pretrained.random_models import random_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        folder, file = Path(tmp) / "tiny", Path(tmp) / "tiny.gguf"
        gemma = Path(tmp) / "gemma3.gguf"
        write_folder(folder)
        write_gguf(file)
        write_gemma3_gguf(gemma)
        # a family entry with code (Falcon's variant), on the folder road
        falcon = random_checkpoint("falcon", Path(tmp) / "falcon")
        for path in (folder, file, gemma, falcon):
            tpde.pretrained.load(path)  # imports done before the count
        fresh = Path(tmp) / "fresh.gguf"  # a file not read before: its tokenizer is built
        fresh.write_bytes(file.read_bytes())
        phi3 = random_checkpoint("phi3", Path(tmp) / "phi3")
        tpde.pretrained.load(phi3)
        cases = [("llama folder", folder), ("llama GGUF", fresh), ("gemma3 GGUF", gemma),
                 ("phi3 folder", phi3), ("falcon folder", falcon)]  # fmt: skip
        if "--all" in sys.argv[1:]:
            cases += _every_family(Path(tmp))
        for name, path in cases:
            order, returns, revisits, io = walk(path)
            entered = ", ".join(io) or "-"
            print(f"{name}: {len(order)} modules + {len(io)} _io, {returns} returns, "
                  f"{revisits} revisits: {' -> '.join(order)} | _io: {entered}")  # fmt: skip


def _every_family(tmp: Path) -> list[tuple[str, Path]]:
    """(name, path) of every family's random folder and of every GGUF case of
    ``tests/pretrained/test_gguf_converted.py`` (its files written by the test oracle, which
    needs transformers), each loaded once before the count. The checkout's root goes on
    ``sys.path`` for the oracle's package ``tests`` (a script's own folder is there, not the
    root: ``python tools/module_walk.py --all`` raised ModuleNotFoundError)."""
    import warnings

    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    import tpde.pretrained
    from tests.pretrained.test_gguf_converted import CASES, write_pair
    from tpde.pretrained.families import FAMILIES
    from tpde.pretrained.random_models import random_checkpoint

    out = [(f"{f} folder", random_checkpoint(f, tmp / "all" / f)) for f in FAMILIES]
    for case in CASES:
        (tmp / "gguf" / case).mkdir(parents=True)
        out.append((f"{case} GGUF", write_pair(case, tmp / "gguf" / case)[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, path in out:
            tpde.pretrained.load(path)
    return out


if __name__ == "__main__":
    main()
