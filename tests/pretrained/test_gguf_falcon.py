"""Falcon GGUF files beyond test_gguf_converted's equality with their folders: every layout
read as llama.cpp reads it (the grouped layout, H_kv key/value heads, one or two norms), and
what llama.cpp's falcon has not (biases, another QKV layout) refused by name.

The files are the tiny Falcon models of :mod:`tests.pretrained.test_gguf_converted`, written as
llama.cpp's converter writes them (:mod:`tests.pretrained.gguf_convert`), then changed.
"""

from __future__ import annotations

import pytest

from tests.pretrained.test_gguf_converted import CASES, tiny
from tpde.pretrained import LoadError, load, read_checkpoint

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

from tests.pretrained.gguf_convert import convert  # noqa: E402

#: case → (H_kv, norms): what the file says, read as the grouped layout.
LAYOUTS = {"falcon": (1, 1), "falcon-per-head": (4, 1), "falcon-grouped": (2, 2),
           "falcon-grouped-one-norm": (2, 1)}  # fmt: skip


def _write(tmp_path, case="falcon", model=None, **options):
    path = tmp_path / f"{case}.gguf"
    convert(model or tiny(case), path, "F32", **options)
    return path


@pytest.mark.parametrize("case", LAYOUTS)
def test_every_layout_is_read_as_the_grouped_one(case, tmp_path):
    """H_kv from head_count_kv, two norms (ln_attn, ln_mlp) where the file holds attn_norm_2,
    else one (input_layernorm)."""
    kv, norms = LAYOUTS[case]
    config, tensors = read_checkpoint(_write(tmp_path, case))
    assert (config.heads, config.kv_heads) == (4, kv)
    two = {"transformer.h.0.ln_attn.weight", "transformer.h.0.ln_mlp.weight"}
    assert (
        two <= set(tensors) if norms == 2 else "transformer.h.0.input_layernorm.weight" in tensors
    )


def test_a_biased_file_is_refused_by_the_bias_name(tmp_path):
    """llama.cpp's falcon reads no bias (Falcon-RW's files carry them, with ALiBi)."""
    config_cls, kwargs, model_cls = CASES["falcon"]
    config = getattr(transformers, config_cls)(**{**kwargs, "bias": True})
    model = getattr(transformers, model_cls)(config).eval()
    with pytest.raises(LoadError, match=r"the tensor 'blk\.0\.attn_qkv\.bias' .* is not one a "
                                        r"falcon model reads"):  # fmt: skip
        load(_write(tmp_path, model=model))


def test_another_qkv_layout_is_refused_by_name(tmp_path):
    path = _write(tmp_path, metadata={"falcon.tensor_data_layout": ("add_string", "other")})
    with pytest.raises(LoadError, match=r"the metadata key 'falcon\.tensor_data_layout' = "
                                        r"'other' is not 'jploski'"):  # fmt: skip
        load(path)
