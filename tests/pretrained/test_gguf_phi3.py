"""Phi-3 GGUF files beyond test_gguf_converted's equality with their folders: LongRoPE's
factor tensors and α read as the folder's scaling (float32 as stored), the sliding window as
llama.cpp reads it (off: 0 and a window ≥ the context read as none, a binding one warned or chosen),
and LongRoPE input tpde refuses by name.

The files are the tiny Phi-3 models of :mod:`tests.pretrained.test_gguf_converted`, written as
llama.cpp's converter writes them (:mod:`tests.pretrained.gguf_convert`), then changed.
"""

from __future__ import annotations

import json
import math
import shutil
import warnings

import numpy as np
import pytest
import torch

from tests.pretrained.test_gguf_converted import (
    CASES,
    N,
    _transformers_reads,
    errors,
    outputs,
    tiny,
    transformers_errors,
    transformers_model,
    write_pair,
)
from tests.pretrained.test_load import _relative
from tpde.fields import LongRoPE
from tpde.pretrained import LoadError, load
from tpde.pretrained._gguf import switched_off

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
    the context is cut, and llama.cpp attends over whole: none, without a warning."""
    path, _ = _write(tmp_path, "phi3", window=window or None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load(path).config.window is None


W = 5  # a window that binds within the context (32) and the N = 9 tokens: Phi-3-mini-4k's kind
_WARNING = (r"the metadata key 'phi3\.attention\.sliding_window' = 5 is a sliding window "
            r"within the file's context \(32 positions\), which llama\.cpp turns off for phi3 "
            r"files .* read as llama\.cpp computes it, without a window\. Pass "
            r"gguf_window='file' to load\(…\) to apply it")  # fmt: skip


@pytest.fixture
def windowed(monkeypatch, tmp_path):
    """(file, folder with the checkpoint's window W, folder of the same values without one):
    Phi-3 with ``sliding_window`` = W, written as llama.cpp's converter writes it."""
    config_cls, kwargs, model_cls = CASES["phi3"]
    monkeypatch.setitem(CASES, "phi3-window", (config_cls, {**kwargs, "sliding_window": W},
                                               model_cls))  # fmt: skip
    folder, file = write_pair("phi3-window", tmp_path, vocabulary=True)
    unwindowed = tmp_path / "no-window"
    shutil.copytree(folder, unwindowed)
    config = json.loads((unwindowed / "config.json").read_text())
    assert config["sliding_window"] == W
    config["sliding_window"] = None
    (unwindowed / "config.json").write_text(json.dumps(config))
    return file, folder, unwindowed


def _differences(model, expected) -> float:
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    return max(errors(model, expected, ids).values())


def test_a_binding_window_reads_as_llama_cpp_computes_with_a_warning(windowed):
    """Default: llama.cpp's reading (no window), warned, naming the key and the keyword; the
    model equals the folder without a window (measured 0) and differs from the checkpoint's
    (measured 0.40 on the logits): the window binds in this test."""
    file, folder, unwindowed = windowed
    with pytest.warns(UserWarning, match=_WARNING) as record:
        model = load(file, dtype=torch.float64)
    assert [w.filename for w in record] == [__file__]  # it points at the call of load
    assert model.config.window is None
    assert _differences(model, load(unwindowed, dtype=torch.float64)) < 1e-12
    windowed_model = load(folder, dtype=torch.float64)
    assert windowed_model.config.window == W
    states = outputs(model, torch.arange(3, 3 + N))[1]
    assert _relative(states, outputs(windowed_model, torch.arange(3, 3 + N))[1]) > 1e-2


@pytest.mark.parametrize("reading, window", [("llama.cpp", None), ("file", W)])
def test_gguf_window_chooses_the_reading_without_a_warning(reading, window, windowed):
    """``gguf_window="llama.cpp"``: the same model, not warned; "file": the window applied on
    every layer, equal to the checkpoint's folder (measured 0)."""
    file, folder, unwindowed = windowed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = load(file, dtype=torch.float64, gguf_window=reading)
    assert model.config.window == window
    expected = load(folder if window else unwindowed, dtype=torch.float64)
    assert _differences(model, expected) < 1e-12


def test_llama_cpps_reading_is_transformers_gguf_loaders(windowed, tmp_path):
    """transformers' GGUF loader maps no ``phi3.attention.sliding_window`` (its Phi3Config's
    window stays None, checked): its model of the file equals tpde's default reading
    (float64, ≤ 1e-12; measured 8.8e-16; 0.83 from the "file" reading), as llama.cpp computes
    it."""
    file, _, _ = windowed
    _transformers_reads("phi3")
    hf = transformers_model(tmp_path, file, torch.float64, "phi3")
    assert hf.config.sliding_window is None
    with pytest.warns(UserWarning, match=_WARNING):
        model = load(file, dtype=torch.float64)
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    measured = transformers_errors(model, hf, ids)
    assert measured.pop("argmax")
    assert max(measured.values()) < 1e-12, measured


def test_a_file_without_the_window_key_has_no_window(tmp_path):
    """A file of a converter older than the key (llama.cpp PR 8931 then defaulted 2047 for the
    32- and 40-layer 4k models; since PR 13676 llama.cpp has no window for any): none, in both
    readings."""
    path, _ = _write(tmp_path, "phi3", unset=("phi3.attention.sliding_window",))
    for reading in (None, "file"):
        assert load(path, gguf_window=reading).config.window is None


@pytest.mark.parametrize(
    "value, match",
    [(5.0, r"'phi3\.attention\.sliding_window' = 5\.0 is not a window \(an integer ≥ 0"),
     (True, r"'phi3\.attention\.sliding_window' = True is not a window")],
)  # fmt: skip
def test_a_window_that_is_not_an_integer_is_refused_by_name(value, match):
    metadata = {"phi3.attention.sliding_window": value, "phi3.context_length": 32}
    for reading in (None, "llama.cpp", "file"):
        with pytest.raises(LoadError, match=match):
            switched_off("phi3.attention.sliding_window", metadata, reading, "turns off")


def test_gguf_window_is_checked(windowed):
    file, folder, _ = windowed
    with pytest.raises(ValueError, match=r"gguf_window must be None, 'llama\.cpp' or 'file'; "
                                         r"received 'checkpoint'"):  # fmt: skip
        load(file, gguf_window="checkpoint")
    with pytest.raises(ValueError, match=r"gguf_window='file' reads a GGUF file's window, but "
                                         r".* is a folder"):  # fmt: skip
        load(folder, gguf_window="file")


@pytest.mark.parametrize("case", ["gpt2", "gemma2"])
def test_gguf_window_for_a_file_of_one_reading_is_refused(case, tmp_path):
    """A gpt2 file has no window, a gemma2 file's llama.cpp and its config read alike: a
    reading chosen for them would do nothing, so it is refused rather than accepted without
    effect."""
    path, _ = _write(tmp_path, case)
    for reading in ("file", "llama.cpp"):
        with pytest.raises(ValueError, match=rf"turns off or does not read, which only llama, "
                                             rf"phi3, qwen2, qwen3, starcoder2 files have; "
                                             rf".*{case}\.gguf holds a {case} model, which "
                                             rf"has one reading"):  # fmt: skip
            load(path, gguf_window=reading)
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


def test_sizes_and_weights_only_scores_read_no_window_and_do_not_warn(windowed):
    """checkpoint_size and weight_scores: no window changes their results (bytes; scores of
    the weights alone), so a binding window is not warned there."""
    from tpde.pretrained import checkpoint_size, weight_scores

    file, folder, _ = windowed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert checkpoint_size(file).total == checkpoint_size(folder).total
        assert len(weight_scores(file, layers=[0]).reports) > 0
