"""GGUF files tpde must refuse, each with a LoadError naming the file's path and the key or
tensor at fault: a truncated or corrupt container (refused before any tensor is read —
nothing half-built), a quantisation type the gguf package cannot dequantise (named), a
tensor no model of the family reads (named, never dropped), a tensor whose shape contradicts
the metadata (both shapes), and a metadata key that would change the computation in a way
tpde does not implement or that llama.cpp reads otherwise than tpde can (named).

The files are the tiny models of :mod:`tests.pretrained.test_gguf_converted`, written as
llama.cpp's converter writes them (:mod:`tests.pretrained.gguf_convert`), then changed.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from tests.pretrained.test_gguf_converted import CASES, tiny
from tpde.pretrained import LoadError, _gguf, load
from tpde.pretrained.families import FAMILIES as REGISTRY

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

from tests.pretrained.gguf_convert import architecture, convert  # noqa: E402

FAMILIES = [case for case in CASES if "-" not in case]  # one case a family
WINDOW = "attention.sliding_window"


def _arch(case: str) -> str:
    return architecture(getattr(transformers, CASES[case][0]).model_type)


def _reads_no_window(family: str) -> bool:
    """Whether the family's GGUF reading has no sliding window, by the registry: its map
    names the window key nowhere (its own ``keys``, ``switched_off``, ``required``,
    ``defaults``, ``ignored``) and the family reads no ``window`` hyper-parameter from a
    config (``Family.keys``). Such a file's window key is refused by name."""
    entry = REGISTRY[family]
    spec = entry.gguf
    named = {*spec.keys, *spec.switched_off, *spec.required, *spec.defaults, *spec.ignored}
    return WINDOW not in named and entry.keys.get("window", (None,))[0] is None


#: The base cases whose family reads no window (phi, gpt2, gpt_neox, stablelm, falcon and
#: gemma today), from the registry: a new family's is covered without an edit here.
WINDOWLESS = [case for case in FAMILIES if _reads_no_window(case)]


def _write(tmp_path, case="llama-tied", qtype="Q8_0", **options):
    path = tmp_path / f"{case}.gguf"
    convert(tiny(case), path, qtype, **options)
    return path


@pytest.fixture
def reads(monkeypatch):
    """The tensors dequantised while the test runs (names, in order): every read of a file's
    tensors, the model's and the RoPE tensors, passes ``_gguf.dequantised``."""
    seen = []
    original = _gguf.dequantised

    def counted(path, name, qtype, raw):
        seen.append(name)
        return original(path, name, qtype, raw)

    monkeypatch.setattr(_gguf, "dequantised", counted)
    return seen


def _refused(path, match: str, reads=None) -> None:
    """load(path) raises a LoadError naming the path and matching ``match``; with ``reads``,
    before any tensor was dequantised."""
    with pytest.raises(LoadError, match=f"{re.escape(str(path))}.*{match}"):
        load(path)
    assert reads is None or reads == [], reads


# ---------------------------------------------------------------------- the container
def _info(data: bytes, name: str) -> dict:
    """Byte positions of the tensor info fields of ``name`` in a GGUF file's header."""
    raw = name.encode()
    at = data.index(len(raw).to_bytes(8, "little") + raw) + 8 + len(raw)
    n_dims = int.from_bytes(data[at : at + 4], "little")
    return {"n_dims": at, "dims": at + 4, "type": at + 4 + 8 * n_dims,
            "offset": at + 8 + 8 * n_dims}  # fmt: skip


def _put(data: bytearray, at: int, value: int, size: int) -> bytearray:
    data[at : at + size] = value.to_bytes(size, "little")
    return data


def _key_type(data: bytes, key: str) -> int:
    raw = key.encode()
    return data.index(len(raw).to_bytes(8, "little") + raw) + 8 + len(raw)


W = "blk.1.ffn_down.weight"  # a tensor of the tiny llama file (written last but the norm)
CORRUPT = {
    "cut-in-data": (lambda d: d[:-40], r"'output_norm.weight' runs past the end of the "
                    r"file \(byte \d+ of \d+\): the file is truncated"),
    "cut-in-header": (lambda d: d[:300], r"its header ends early or is malformed"),
    "unknown-type": (lambda d: _put(d, _info(d, W)["type"], 99, 4),
                     rf"the tensor '{W}' has unknown ggml type 99"),
    "five-dims": (lambda d: _put(d, _info(d, W)["n_dims"], 5, 4),
                  rf"the tensor '{W}' has 5 dimensions \(GGUF: 1 to 4\)"),
    "dim-zero": (lambda d: _put(d, _info(d, W)["dims"] + 8, 0, 8),
                 rf"the tensor '{W}' has shape \(0, 64\), a dimension 0"),
    "huge-dim": (lambda d: _put(d, _info(d, W)["dims"] + 8, 2**62, 8),
                 rf"the tensor '{W}' runs past the end of the file"),
    "misaligned": (lambda d: _put(d, _info(d, W)["offset"],
                                  int.from_bytes(d[_info(d, W)["offset"]:][:8], "little") + 1, 8),
                   rf"the tensor '{W}' starts at offset \d+, not a multiple of the alignment 32"),
    "tensor-twice": (lambda d: d.replace(b"blk.1.attn_k.weight", b"blk.1.attn_q.weight"),
                     r"the tensor 'blk.1.attn_q.weight' appears twice"),
    "key-twice": (lambda d: d.replace(b"llama.block_counX", b"llama.block_count"),
                  r"the metadata key 'llama.block_count' appears twice"),
    "value-type": (lambda d: _put(d, _key_type(d, "llama.context_length"), 77, 4),
                   r"its header ends early or is malformed \(unknown metadata value type 77\)"),
    "string-in-array": (lambda d: _put(d, d.index(b"\x05" + bytes(7) + b"tpdeB"), 2**40, 8),
                        r"a string of 1099511627776 bytes runs past the end of the file"),
}  # fmt: skip


@pytest.mark.parametrize("change", CORRUPT.values(), ids=CORRUPT.keys())
def test_a_corrupt_or_truncated_file_is_refused_before_any_tensor_is_read(change, tmp_path, reads):
    extra = {"llama.block_counX": ("add_uint32", 2),
             "tpde.test.words": ("add_array", ["tpdeA", "tpdeB"])}  # fmt: skip
    whole = _write(tmp_path, metadata=extra).read_bytes()
    edit, match = change
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(edit(bytearray(whole))))
    _refused(bad, r"is not a readable GGUF file \(.*" + match, reads)


# ---------------------------------------------------------------------- tensors
@pytest.mark.parametrize("case", ["llama-tied", "phi3-longrope"])
def test_every_tensor_read_passes_the_one_seam_rope_tensors_included(case, tmp_path, reads):
    """The ``reads`` seam (``_gguf.dequantised``, which the refusals above find empty) sees
    each tensor of the file once: the model's and the per-pair RoPE tensors (llama's
    ``rope_freqs.weight``, all ones here: the unscaled schedule; Phi-3's LongRoPE factors),
    which ``_gguf_rope`` reads through it."""
    cfg = tiny(case).config
    rotated = cfg.hidden_size // cfg.num_attention_heads
    rotated = int(rotated * getattr(cfg, "partial_rotary_factor", 1.0))
    extra = {"rope_freqs.weight": np.ones(rotated // 2, dtype=np.float32)}
    path = _write(tmp_path, case, "F32", tensors=extra if case == "llama-tied" else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Phi-3's binding window (tested in test_gguf_phi3)
        load(path)
    names = [tensor.name for tensor in gguf.GGUFReader(path).tensors]
    rope = {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"}
    assert rope & set(names)  # the case holds RoPE tensors
    assert sorted(reads) == sorted(names)


@pytest.mark.parametrize("kind", ["Q8_1", "F64"])
def test_a_type_gguf_cannot_dequantise_is_named_before_any_tensor_is_read(kind, tmp_path, reads):
    """ffn_down (32 × 64) stored as Q8_1 (blocks of 32 values in 36 bytes) or F64, types
    gguf 0.19 does not dequantise."""
    qtype = gguf.GGMLQuantizationType[kind]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    stored = (np.zeros((32, 64 // block * size), np.uint8), qtype)
    path = _write(tmp_path, drop=(W,), tensors={W: stored})
    match = (
        rf"the tensor '{W}' is stored as {kind}, a quantisation type the gguf package "
        r"cannot dequantise \(it reads F32, F16, Q4_0, .*Q8_0.*\); re-quantise the file"
    )
    _refused(path, match, reads)


@pytest.mark.parametrize("case", FAMILIES)
def test_a_tensor_the_family_does_not_read_is_refused_by_name(case, tmp_path):
    extra = {"blk.0.ffn_gate_exps.weight": np.zeros((2, 4, 32), dtype=np.float32)}
    path = _write(tmp_path, case, "F32", tensors=extra)
    _refused(path, r"the tensor 'blk.0.ffn_gate_exps.weight' \(shape \(2, 4, 32\)\) is not "
                   rf"one a {case.split('-')[0]} model reads: the checkpoint is of another "
                   r"architecture or variant than its metadata says")  # fmt: skip


def test_a_tensor_unknown_to_llama_cpp_is_refused_by_name(tmp_path):
    path = _write(tmp_path, tensors={"mystery.weight": np.ones(3, dtype=np.float32)})
    _refused(path, r"the tensor 'mystery.weight' \(shape \(3,\)\) is not one a llama model")


#: case → (file tensor, wrong shape written, the shape the error reports, the metadata's)
MISSHAPEN = {
    "llama": ("blk.0.attn_q.weight", (32, 40), "(32, 40)", "(32, 32)"),
    "qwen3": ("blk.1.attn_k_norm.weight", (64,), "(64,)", "(128,)"),
    "gemma3": ("blk.0.attn_q_norm.weight", (128,), "(128,)", "(256,)"),
    "phi": ("output.bias", (41,), "(41,)", "(40,)"),
    "gpt_neox": ("blk.1.attn_qkv.weight", (96, 40), "(96, 40)", "(96, 32)"),
    # GPT-2's Conv1D: reported as the folder stores it, (in, out), and said so
    "gpt2": ("blk.0.attn_qkv.weight", (96, 40), r"(40, 96)", "(32, 96)"),
    "phi3": ("blk.1.ffn_up.weight", (128, 40), "(128, 40)", "(128, 32)"),  # [W_gate; W_up]
    "falcon": ("blk.0.attn_qkv.weight", (64, 32), "(64, 32)", "(48, 32)"),  # H_kv = 1: 4 + 2 heads
}


@pytest.mark.parametrize("case", MISSHAPEN)
def test_a_tensor_whose_shape_contradicts_the_metadata_names_both_shapes(case, tmp_path):
    name, shape, found, implied = MISSHAPEN[case]
    wrong = {name: np.zeros(shape, dtype=np.float32)}
    path = _write(tmp_path, case, "F32", drop=(name,), tensors=wrong)
    note = r", shapes \(in, out\) as the folder stores it" if case == "gpt2" else ""
    _refused(path, rf"the tensor '{name}' \(.*{note}\) has shape {re.escape(found)}; the "
                   rf"metadata implies {re.escape(implied)}")  # fmt: skip


def test_metadata_that_contradicts_the_tensors_names_the_first_with_both_shapes(tmp_path):
    model = tiny("llama-tied")
    model.config.hidden_size = 48  # the metadata says 48, the tensors 32
    path = tmp_path / "wide.gguf"
    convert(model, path, "F32")
    _refused(path, r"the tensor 'token_embd.weight' \(model.embed_tokens.weight\) has shape "
                   r"\(40, 32\); the metadata implies \(40, 48\)")  # fmt: skip


# ---------------------------------------------------------------------- metadata keys
_UNREAD = "changes the computation in a way tpde does not implement for {arch} files"
#: case → (metadata key without the prefix, GGUFWriter method, value, message)
KEYS = [
    # the windows read: llama, qwen2, qwen3, starcoder2: test_gguf_windows; phi3:
    # test_gguf_phi3; olmo2 (OLMo-3): test_load_olmo3; gemma2, gemma3: below
    *((case, WINDOW, "add_uint32", 4, _UNREAD) for case in WINDOWLESS),
    *((case, "expert_count", "add_uint32", 4, _UNREAD) for case in FAMILIES),
    ("qwen2", "expert_used_count", "add_uint32", 2, _UNREAD),
    ("llama", "attention.causal", "add_bool", False, _UNREAD),
    ("gpt2", "rope.freq_base", "add_float32", 1e4, _UNREAD),
    ("olmo2", "attention.sliding_window", "add_int32", -1, "is not a window"),
]  # fmt: skip


@pytest.mark.parametrize(
    "case, key, method, value, message", KEYS, ids=[f"{k[0]}-{k[1]}" for k in KEYS]
)
def test_a_key_that_would_change_the_computation_is_refused_by_name(
    case, key, method, value, message, tmp_path
):
    arch = _arch(case)
    path = _write(tmp_path, case, "F32", metadata={f"{arch}.{key}": (method, value)})
    named = re.escape(f"the metadata key '{arch}.{key}' = {value!r} ")
    _refused(path, named + message.format(arch=arch))


def test_a_file_without_a_key_llama_cpp_requires_is_refused_by_name(tmp_path):
    """gemma3's window: llama.cpp's load_hparams reads it without a default (GGUFMap.required;
    the optional keys llama.cpp defaults are read with its defaults: test_gguf_gemma_defaults)."""
    path = _write(tmp_path, "gemma3", "F32", unset=("gemma3.attention.sliding_window",))
    _refused(path, r"the metadata key 'gemma3\.attention\.sliding_window' is missing: llama\.cpp "
                   r"reads no gemma3 file without it")  # fmt: skip


def test_the_window_gemma_files_carry_is_read(tmp_path):
    """The control: llama.cpp reads ``attention.sliding_window`` of gemma2 and gemma3 files
    (test_gguf_converted: each equal to its folder with a window of 3 over 9 tokens)."""
    for case in ("gemma2", "gemma3"):
        assert load(_write(tmp_path, case, "F32")).config.window == 3


@pytest.mark.parametrize(
    "case, window", [("llama", 0), ("qwen2", 32), ("starcoder2", 1000), ("olmo2", 0)]
)
def test_a_window_that_cuts_nothing_within_the_context_is_read_as_none(case, window, tmp_path):
    """A window of 0 (llama.cpp's "none") or of at least ``context_length`` (32): llama.cpp's
    reading and a Hugging Face config's agree there; read as none, without a warning (a
    window of 4 has two readings: test_gguf_windows; an olmo2 file's window > 0 is OLMo-3's,
    read as the olmo3 family: test_load_olmo3)."""
    key = f"{_arch(case)}.attention.sliding_window"
    path = _write(tmp_path, case, "F32", metadata={key: ("add_uint32", window)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load(path).config.window is None
