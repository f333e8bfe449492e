"""tpde.pretrained.weight_scores (the weights-only structure scores streamed one attention
block at a time), checkpoint_size and load(max_memory=...), on tiny checkpoints.

Oracle: ``model_structure(load(path))``, the scores of the loaded model. Both read the same
numbers into float64 (a float64 or float32 checkpoint, a GGUF file's float32 or Q8_0
dequantised to float32: exact in float64) and build the same attention field, so they
differ only by the order of rounded sums in d × d products (≈ 1e-16 relative each):
rel=1e-12 leaves margin; the counts (inertia, sign, sum case) and the kinds of breaks are
compared exactly. Peak memory is measured in benchmarks/streamed_scores.py; here, what is
read: only one block's attention tensors at a time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
import torch

from tests.pretrained import test_load
from tpde.pretrained import (
    CheckpointSize,
    LoadError,
    checkpoint_size,
    load,
    loader,
    model_structure,
    read_checkpoint,
    streamed,
    weight_scores,
)
from tpde.pretrained._build import ATTENTION_ROLES

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

F64 = torch.float64
REL = 1e-12
_NUMBERS = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?")


def _same(streamed_scores, loaded) -> None:
    """The two ModelStructures agree: places, counts and break kinds exactly, scores to REL."""
    assert streamed_scores.places == loaded.places
    assert streamed_scores.gaps is None
    for mine, theirs in zip(streamed_scores.reports, loaded.reports, strict=True):
        assert mine.sum_structure == theirs.sum_structure
        assert [_NUMBERS.sub("#", b) for b in mine.breaks] == [
            _NUMBERS.sub("#", b) for b in theirs.breaks
        ]
        for name in ("symmetry", "directionality"):
            assert getattr(mine, name) == pytest.approx(getattr(theirs, name), rel=REL, abs=1e-300)
        for a, b in zip(mine.heads, theirs.heads, strict=True):
            assert (a.inertia, a.sign) == (b.inertia, b.sign)
            for field in dataclasses.fields(a):
                x, y = getattr(a, field.name), getattr(b, field.name)
                if isinstance(x, float):
                    assert x == pytest.approx(y, rel=REL, abs=1e-300), field.name


@pytest.fixture(scope="module", params=list(test_load.FAMILIES))
def folder64(request, tmp_path_factory):
    """A tiny float64 checkpoint of each family test_load reads against transformers."""
    folder = tmp_path_factory.mktemp(request.param)
    test_load._oracle(request.param).save_pretrained(folder)
    return folder


def test_streamed_scores_equal_the_loaded_models_every_family(folder64):
    _same(weight_scores(folder64), model_structure(load(folder64, dtype=F64)))


@pytest.fixture(scope="module")
def llama32(tmp_path_factory):
    """A tiny float32 Llama folder (as real checkpoints are), 3 layers, GQA 4/2, RoPE."""
    torch.manual_seed(5)
    config = transformers.LlamaConfig(
        vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        attention_bias=True,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    folder = tmp_path_factory.mktemp("llama32")
    model.save_pretrained(folder)
    return folder


def test_float32_folder_against_the_default_float32_load(llama32):
    """load's default dtype keeps float32 weights; the projection reads them in float64."""
    _same(weight_scores(llama32), model_structure(load(llama32)))
    chosen = weight_scores(llama32, layers=[2, 0])
    _same(chosen, model_structure(load(llama32), layers=[2, 0]))
    assert chosen.places == ((2, 0), (0, 0))


def test_float32_precision_within_its_bound(llama32):
    """dtype=float32: the same places and counts, every score within test_factored's F32
    of the float64 scores (float32 rounding times the eigen-gaps the projection divides by;
    measured 1e-6 here)."""
    from tests.fields.gradient_flow.test_factored import F32

    exact, fast = weight_scores(llama32), weight_scores(llama32, dtype=torch.float32)
    assert fast.places == exact.places
    for mine, theirs in zip(fast.reports, exact.reports, strict=True):
        assert mine.symmetry == pytest.approx(theirs.symmetry, rel=F32)
        for a, b in zip(mine.heads, theirs.heads, strict=True):
            assert (a.inertia, a.sign) == (b.inertia, b.sign)
            for name in ("symmetry_residual", "value_residual", "definite_residual",
                         "rope_residual", "directionality"):  # fmt: skip
                assert getattr(a, name) == pytest.approx(getattr(b, name), rel=F32), name


def test_albert_groups_each_stored_block_scored_once(tmp_path, monkeypatch):
    """Uneven groups (L = 5, G = 3, k = 2: layers apply groups 0 0 1 1 2): the places of
    the loaded model's schedule, each stored block read once."""
    from tests.pretrained.test_load_albert_groups import _oracle

    _oracle(5, 3, 2).save_pretrained(tmp_path)
    reads = _record_reads(monkeypatch)
    result = weight_scores(tmp_path)
    _same(result, model_structure(load(tmp_path, dtype=F64)))
    assert [block for block, _ in reads] == [0, 1, 2, 3, 4, 5]
    assert result.reports[0] is result.reports[2]  # layers 0 and 1 apply group 0


def test_gguf_llama_file(tmp_path):
    from tests.pretrained.test_gguf_llama import write_tiny

    path = tmp_path / "tiny.gguf"
    write_tiny(path)
    _same(weight_scores(path), model_structure(load(path)))
    size, (_, tensors) = checkpoint_size(path, torch.float32), read_checkpoint(path)
    assert size.total == sum(t.numel() * 4 for t in tensors.values())
    assert size.file == path.stat().st_size


def test_the_vocabulary_is_left_unread(tmp_path):
    """The streamed scores and checkpoint_size open a GGUF file without its vocabulary: the
    tokenizer.ggml.* arrays are walked (checked) and kept as their lengths only (Unread), the
    rest of the metadata as read in full; the source then has no tokenizer."""
    from tests.pretrained.test_gguf_llama import write_tiny
    from tpde._io.gguf_file import Unread, read_container

    path = tmp_path / "tiny.gguf"
    write_tiny(path)
    full, _ = read_container(path)
    lean, _ = read_container(path, vocabulary=False)
    arrays = [k for k, v in full.items() if k.startswith("tokenizer.ggml.") and isinstance(v, list)]
    assert sorted(arrays) == ["tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                              "tokenizer.ggml.tokens"]  # fmt: skip
    for key in arrays:
        assert isinstance(lean[key], Unread) and len(lean[key]) == len(full[key])
    assert {k: v for k, v in lean.items() if k not in arrays} == {
        k: v for k, v in full.items() if k not in arrays
    }
    assert loader._open(path, window_matters=False).tokenizer() is None
    assert loader._open(path).tokenizer() is not None


def test_gguf_gemma3_q8_file(tmp_path):
    """Q8_0 weights, QK-norms, head_dim 256 ≠ d/H, sliding windows, norms stored as 1 + w."""
    from tests.pretrained.test_gguf_gemma3 import _hf_model, _write

    path = _write(tmp_path / "tiny.gguf", _hf_model())
    result = weight_scores(path)
    _same(result, model_structure(load(path)))
    assert all(any("QK-norm" in b for b in r.breaks) for r in result.reports)


def _record_reads(monkeypatch) -> list:
    """(block, roles) of every read weight_scores makes, through its opened source."""
    reads, opened = [], streamed._open

    def recording(path, **options):
        source = opened(path, **options)

        def read(cfg, expected, dtype, device):
            blocks = {block for _, block, _, _ in expected.values()}
            assert len(blocks) == 1, blocks
            reads.append((blocks.pop(), {role for role, *_ in expected.values()}))
            return source.read(cfg, expected, dtype, device)

        return dataclasses.replace(source, read=read)

    monkeypatch.setattr(streamed, "_open", recording)
    return reads


def test_only_one_blocks_attention_is_read_at_a_time(llama32, monkeypatch):
    reads = _record_reads(monkeypatch)
    weight_scores(llama32, layers=[1, 2])
    assert [block for block, _ in reads] == [1, 2]
    assert all(roles <= set(ATTENTION_ROLES) for _, roles in reads)
    assert {"q", "k", "v", "o"} <= reads[0][1]


def test_bad_input_is_refused_before_any_tensor_is_read(llama32, tmp_path, monkeypatch):
    reads = _record_reads(monkeypatch)
    with pytest.raises(FileNotFoundError, match="no model folder or GGUF file at"):
        weight_scores(tmp_path / "absent")
    with pytest.raises(TypeError, match="path must be a str or a Path"):
        weight_scores(3)
    with pytest.raises(IndexError, match=r"layer index 3 is out of range: the model has 3 "):
        weight_scores(llama32, layers=[0, 3])
    with pytest.raises(TypeError, match=r"layers must be a sequence of layer indices; received 1"):
        weight_scores(llama32, layers=1)
    with pytest.raises(TypeError, match=r"layer indices; received \[0\.5\]"):
        weight_scores(llama32, layers=[0.5])
    with pytest.raises(TypeError, match="layer index must be an int; received True"):
        weight_scores(llama32, layers=[True])
    with pytest.raises(ValueError, match="rtol"):
        weight_scores(llama32, rtol=-1.0)
    with pytest.raises(TypeError, match=r"dtype must be torch\.float64 or torch\.float32"):
        weight_scores(llama32, dtype=torch.float16)
    other = tmp_path / "other"
    other.mkdir()
    for name in ("config.json", "model.safetensors"):
        (other / name).write_bytes((llama32 / name).read_bytes())
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "mamba"}))
    with pytest.raises(LoadError, match=r"model_type 'mamba', which tpde does not read"):
        weight_scores(other)
    assert reads == []


def test_a_checkpoint_without_an_attention_tensor_names_it(llama32, tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = load_file(llama32 / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    (tmp_path / "config.json").write_text((llama32 / "config.json").read_text())
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LoadError, match=r"model\.layers\.1\.self_attn\.k_proj\.weight"):
        weight_scores(tmp_path)


def test_checkpoint_size_counts_what_load_reads(llama32):
    size = checkpoint_size(llama32)
    assert isinstance(size, CheckpointSize) and size.dtype == F64
    cfg, tensors = read_checkpoint(llama32, F64)
    assert size.total == sum(t.numel() * 8 for t in tensors.values())
    for block in range(cfg.layers):
        stem = f"model.layers.{block}."
        assert size.blocks[block] == sum(
            t.numel() * 8 for name, t in tensors.items() if name.startswith(stem)
        )
        assert size.attention[block] == sum(
            t.numel() * 8 for name, t in tensors.items() if name.startswith(stem + "self_attn.")
        )
    assert size.largest_block == max(size.blocks) < size.total
    assert size.file == (llama32 / "model.safetensors").stat().st_size
    half = checkpoint_size(llama32, torch.float32)
    assert 2 * half.total == size.total and 2 * half.attention[0] == size.attention[0]
    with pytest.raises(TypeError, match="dtype"):
        checkpoint_size(llama32, torch.int64)


def test_load_refuses_a_model_larger_than_max_memory(llama32, monkeypatch):
    need = checkpoint_size(llama32, torch.float32).total
    with pytest.raises(MemoryError, match=rf"need .* \({need} bytes\), more than max_memory"):
        load(llama32, max_memory=need - 1)
    with pytest.raises(MemoryError, match=r"tpde\.pretrained\.weight_scores\(path\)"):
        read_checkpoint(llama32, F64, max_memory=need)  # float64: twice as many bytes
    assert len(load(llama32, max_memory=need).layers) == 3
    for bad in ("lots", -1, 0, True, math.nan):
        with pytest.raises(ValueError, match=r"max_memory must be 'auto', None or a number"):
            load(llama32, max_memory=bad)
    monkeypatch.setattr(loader, "physical_memory", lambda: need - 1)
    with pytest.raises(MemoryError, match="more than this machine's physical memory"):
        load(llama32)
    assert len(load(llama32, max_memory=None).layers) == 3
    monkeypatch.setattr(loader, "physical_memory", lambda: None)  # the platform does not say
    assert len(load(llama32).layers) == 3


def test_physical_memory_is_a_positive_count_or_none():
    memory = loader.physical_memory()
    assert memory is None or (isinstance(memory, int) and memory > 0)
