"""Phi-3 GGUF files beyond test_gguf_converted's equality with their folders: LongRoPE's
factor tensors and α read as the folder's scaling (float32 as stored), the sliding window as
llama.cpp reads it (off: 0 and a window ≥ the context read as none, a binding one refused),
and LongRoPE input tpde refuses by name.

The files are the tiny Phi-3 models of :mod:`tests.pretrained.test_gguf_converted`, written as
llama.cpp's converter writes them (:mod:`tests.pretrained.gguf_convert`), then changed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.pretrained.test_gguf_converted import tiny
from tpde.fields import LongRoPE
from tpde.pretrained import LoadError, load

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

from tests.pretrained.gguf_convert import convert  # noqa: E402

FACTORS = ("rope_factors_long.weight", "rope_factors_short.weight")


def _write(tmp_path, case="phi3-longrope", window=None, **options):
    model = tiny(case)
    if window is not None:
        model.config.sliding_window = window
    path = tmp_path / f"{case}.gguf"
    convert(model, path, "F32", **options)
    return path, model.config


def test_longrope_factors_and_alpha_are_read_as_stored(tmp_path):
    """Long and short factors the float32 values the file holds, C₀ from
    rope.scaling.original_context_length, α = √(1 + ln 8/ln 4) as stored (float32)."""
    path, config = _write(tmp_path)
    scaling = load(path).layers[0].attention.position.scaling
    assert isinstance(scaling, LongRoPE)
    for key in ("short_factor", "long_factor"):
        expected = np.float32(config.rope_parameters[key]).astype(np.float64)
        assert getattr(scaling, key) == tuple(expected.tolist())
    assert scaling.original_context == 4
    alpha = math.sqrt(1 + math.log(32 / 4) / math.log(4))
    assert scaling.attention_factor == float(np.float32(alpha))
    assert abs(scaling.attention_factor - alpha) < 1e-7  # float32 rounding of α


@pytest.mark.parametrize("window", [0, 32, 262144])
def test_a_window_llama_cpp_and_the_folder_agree_on_is_read_as_none(window, tmp_path):
    """0 (the converter's "none") or at least the context (32): no pair of positions within
    the context is cut, and llama.cpp attends over whole."""
    path, _ = _write(tmp_path, "phi3", window=window or None)
    assert load(path).config.window is None


def test_a_window_that_binds_within_the_context_is_refused_by_name(tmp_path):
    """Phi-3-mini-4k's kind (2047 of 4096): llama.cpp turns it off, a Hugging Face config
    applies it."""
    path, _ = _write(tmp_path, "phi3", window=31)
    match = r"'phi3\.attention\.sliding_window' = 31 is one llama\.cpp does not read .*two readings"
    with pytest.raises(LoadError, match=match):
        load(path)


#: change → message: LongRoPE input tpde refuses, each named.
BAD = {
    "no-alpha": ({"unset": ("phi3.rope.scaling.attn_factor",)},
                 r"'phi3\.rope\.scaling\.attn_factor' is missing beside LongRoPE's factor "
                 r"tensors: llama\.cpp would scale by 1"),
    "one-tensor": ({"drop": ("rope_factors_short.weight",)},
                   r"holds 'rope_factors_long\.weight' but not 'rope_factors_short\.weight'"),
    "misshapen": ({"drop": ("rope_factors_long.weight",),
                   "tensors": {"rope_factors_long.weight": np.ones(4, dtype=np.float32)}},
                  r"the tensor 'rope_factors_long\.weight' has shape \(4,\); the metadata "
                  r"implies \(2,\)"),
    "not-positive": ({"drop": ("rope_factors_short.weight",),
                      "tensors": {"rope_factors_short.weight": -np.ones(2, dtype=np.float32)}},
                     r"'rope_factors_short\.weight' holds divisors ≤ 0"),
    "and-linear": ({"metadata": {"phi3.rope.scaling.factor": ("add_float32", 2.0)}},
                   r"beside them 'phi3\.rope\.scaling\.factor'; tpde reads the factors with "
                   r"'phi3\.rope\.scaling\.attn_factor' alone"),
}  # fmt: skip


@pytest.mark.parametrize("change", BAD.values(), ids=BAD.keys())
def test_longrope_input_tpde_cannot_honour_is_refused_by_name(change, tmp_path):
    options, match = change
    path, _ = _write(tmp_path, **options)
    with pytest.raises(LoadError, match=match):
        load(path)


def test_an_alpha_without_factors_is_refused_by_name(tmp_path):
    """llama.cpp multiplies every rotation by ``rope.scaling.attn_factor``; without LongRoPE's
    factors no Hugging Face Phi-3 config does."""
    path, _ = _write(tmp_path, "phi3", metadata={"phi3.rope.scaling.attn_factor":
                                                 ("add_float32", 1.5)})  # fmt: skip
    with pytest.raises(LoadError, match=r"'phi3\.rope\.scaling\.type' = 'none' \(with "
                                        r"\['phi3\.rope\.scaling\.attn_factor'\]\) is a RoPE "
                                        r"scaling tpde does not read"):  # fmt: skip
        load(path)
