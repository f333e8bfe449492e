"""RoPE scaling in GGUF files: llama.cpp's ``rope.scaling.*`` keys and a Llama-3
``rope_freqs.weight`` tensor, each read as the scaling of the folder of the same weights, at
positions past the original context.

The files are written as llama.cpp's converter writes them (:mod:`tests.pretrained.
gguf_convert`): "linear" and "yarn" as metadata keys; "llama3" as the tensor of per-pair
divisors f_m the converter computes in float32, with no scaling key, which tpde reads as
θ'_m = θ_m/f_m. Where every f_m is 1 or s (no pair on the ramp between the two wavelengths)
they are exact and the file equals its folder to rounding (≤ 1e-12); with a pair on the ramp
its divisor is the float32 rounding of 1/((1 − γ)/s + γ): the file is llama.cpp's model
exactly and the folder's to that rounding (≤ 1e-6 relative, measured 2.9e-8; the exact
cases measured 0).

Against transformers' GGUF loader: it reads no scaling of these files (measured in the test,
which then skips naming what it computes: the unscaled model); its weights given the
checkpoint's config (the scaling) equal tpde's model of the file to rounding.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from tests.pretrained.rope_oracle import float64_rope
from tests.pretrained.test_gguf_converted import (
    CASES,
    _transformers_reads,
    errors,
    tiny,
    transformers_errors,
    transformers_model,
    write_pair,
)
from tests.pretrained.test_load_rope_scaling import _rotary_class
from tpde.fields import LinearScaling, LongRoPE, YaRN
from tpde.pretrained import LoadError, load

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

from tests.pretrained.gguf_convert import architecture, convert  # noqa: E402

L = 96  # tokens: past every original context below
_BASE = {**CASES["llama"][1], "max_position_embeddings": 256}


def _llama3(original: int, high: float, factor: float) -> dict:
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
            "high_freq_factor": high, "original_max_position_embeddings": original,
            "rope_theta": 1e4}  # fmt: skip


#: name → (case of test_gguf_converted, rope_parameters, scaling class tpde reads, tolerance)
SCALED = {
    "linear": ("llama", {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
               LinearScaling, 1e-12),
    "yarn": ("qwen2", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                       "beta_fast": 8.0, "beta_slow": 2.0, "rope_theta": 1e4}, YaRN, 1e-12),
    # head dimension 8: wavelengths 2π·10^{m} (m = 0 … 3); C₀ = 40, h = 2: 6.3 < 20, the
    # others > 40 — divisors 1, 8, 8, 8, exact in float32
    "llama3-exact": ("llama", _llama3(40, 2.0, 8.0), LongRoPE, 1e-12),
    # C₀ = 64, h = 4: the wavelength 62.8 lies on the ramp [16, 64]
    "llama3-ramp": ("llama", _llama3(64, 4.0, 3.0), LongRoPE, 1e-6),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _scaled_cases(monkeypatch):
    for name, (case, params, _, _) in SCALED.items():
        config_cls, kwargs, model_cls = CASES[case]
        kwargs = {**kwargs, "max_position_embeddings": 256, "rope_parameters": params}
        monkeypatch.setitem(CASES, name, (config_cls, kwargs, model_cls))


@pytest.mark.parametrize("name", list(SCALED))
def test_scaled_file_equals_its_folder_past_the_original_context(name, tmp_path):
    _, _, cls, tolerance = SCALED[name]
    folder, file = write_pair(name, tmp_path)
    file_model = load(file, dtype=torch.float64)
    folder_model = load(folder, dtype=torch.float64)
    scaling = file_model.layers[0].attention.position.scaling
    assert isinstance(scaling, cls), scaling
    ids = torch.randint(3, 40, (L,), generator=torch.Generator().manual_seed(1))
    measured = errors(file_model, folder_model, ids)
    assert max(measured.values()) < tolerance, measured


def test_llama3_divisors_are_read_as_the_converter_wrote_them(tmp_path):
    from tests.pretrained.gguf_convert import llama3_rope_freqs

    _, file = write_pair("llama3-ramp", tmp_path)
    scaling = load(file).layers[0].attention.position.scaling
    written = llama3_rope_freqs(tiny("llama3-ramp").config)
    assert scaling.short_factor == scaling.long_factor == tuple(float(f) for f in written)
    assert scaling.attention_scaling == 1.0
    assert 1.0 < written[1] < 3.0 and written[0] == 1.0 and written[3] == 3.0  # one on the ramp


@pytest.mark.parametrize(
    "metadata, match",
    [
        ({"llama.rope.scaling.yarn_attn_factor": ("add_float32", 1.5)},
         r"'llama.rope.scaling.yarn_attn_factor' = 1.5 is a RoPE scaling tpde does not "
         r"implement \(it reads this key only at 1.0"),
        ({"llama.rope.scaling.yarn_log_multiplier": ("add_float32", 0.1)},
         r"'llama.rope.scaling.yarn_log_multiplier' = 0.1"),
        ({"llama.rope.scaling.type": ("add_string", "yarn"),
          "llama.rope.scaling.factor": ("add_float32", 4.0)},
         r"'llama.rope.scaling.original_context_length' is missing, and 'yarn' RoPE scaling "
         r"needs it"),
        ({"llama.rope.scaling.type": ("add_string", "linear"),
          "llama.rope.scaling.factor": ("add_float32", 2.0),
          "llama.rope.scaling.yarn_beta_fast": ("add_float32", 8.0)},
         r"'llama.rope.scaling.yarn_beta_fast' = 8.0 is not read by 'linear' RoPE scaling"),
        ({"llama.rope.scaling.type": ("add_string", "none"),
          "llama.rope.scaling.factor": ("add_float32", 2.0)},
         r"'llama.rope.scaling.type' = 'none' .* is a RoPE scaling tpde does not read"),
        ({"llama.rope.scaling.factor": ("add_float32", -2.0)},
         r"rope_scaling.factor must be finite and > 0; received -2.0"),
    ],
)  # fmt: skip
def test_scaling_keys_tpde_cannot_honour_are_refused_by_name(metadata, match, tmp_path):
    _, file = write_pair("llama", tmp_path, metadata=metadata)
    with pytest.raises(LoadError, match=match):
        load(file)


def test_a_factor_without_a_type_is_linear_as_in_llama_cpp(tmp_path):
    metadata = {"llama.rope.scaling.factor": ("add_float32", 2.0)}
    _, file = write_pair("llama", tmp_path, metadata=metadata)
    assert load(file).layers[0].attention.position.scaling == LinearScaling(2.0)


def _unscaled_file(name: str, tmp_path):
    """The weights of case ``name`` written with the scaling removed (rope_type "default"; a
    llama3 case then has no ``rope_freqs.weight``)."""
    model = tiny(name)
    model.config.rope_parameters = {"rope_type": "default", "rope_theta": 1e4}
    path = tmp_path / "unscaled.gguf"
    convert(model, path, "F32", vocabulary=True)
    return path


def _without_biases(name: str, monkeypatch) -> None:
    """The llama cases without their attention biases, which transformers' loader does not
    read from a llama file (test_gguf_converted.HF_CASES)."""
    config_cls, kwargs, model_cls = CASES[name]
    kwargs = {k: v for k, v in kwargs.items() if k != "attention_bias"}
    monkeypatch.setitem(CASES, name, (config_cls, kwargs, model_cls))


@contextlib.contextmanager
def _transformers_scaled(name: str, tmp_path, **options):
    """(transformers' model of the scaled file of case ``name``, float64, its RoPE evaluated
    by its own ``ROPE_INIT_FUNCTIONS`` and rotary ``forward`` in float64 —
    tests/pretrained/rope_oracle.py —, norms and softmax as in test_gguf_converted; the file,
    the folder)."""
    case = WEIGHTS[name][0]
    _transformers_reads(case)
    folder, file = write_pair(name, tmp_path, vocabulary=True)
    if "config" in options:
        options["config"] = transformers.AutoConfig.from_pretrained(folder)
    with float64_rope(_rotary_class(case)):
        hf = transformers_model(tmp_path, file, torch.float64, case, **options)
        for module in hf.modules():  # transformers' own RoPE forward (float64 here)
            if "forward" in vars(module) and type(module).__name__.endswith("RotaryEmbedding"):
                del module.forward
        yield hf, file


@pytest.mark.parametrize("name", list(SCALED))
def test_scaled_file_against_transformers_gguf_loader(name, monkeypatch, tmp_path):
    """transformers' model of the scaled file (``from_pretrained(…, gguf_file=…)``, float64)
    against tpde's. Where its config holds the file's scaling, the two must agree within the
    case's tolerance. Where it holds none (transformers 5.25 maps no ``rope.scaling.*`` key
    but gpt-oss's and reads no ``rope_freqs.weight``), the test measures what the loader
    computes instead — tpde's model of the same weights written unscaled (≤ 1e-12; measured
    ≤ 1.4e-15), not the scaled one (> 1e-3; measured 0.75–0.87) — and skips, stating those
    numbers."""
    ids = torch.randint(3, 40, (L,), generator=torch.Generator().manual_seed(1))
    _without_biases(name, monkeypatch)
    unscaled_file = _unscaled_file(name, tmp_path)  # drawn in float32, as the scaled one
    with _transformers_scaled(name, tmp_path) as (hf, file):
        scaled = transformers_errors(load(file, dtype=torch.float64), hf, ids)
        params = dict(hf.config.rope_parameters or {})
        if params.get("rope_type", "default") != "default":
            assert scaled.pop("argmax")
            assert max(scaled.values()) < SCALED[name][3], scaled
            return
        unscaled = load(unscaled_file, dtype=torch.float64)
        unscaled = transformers_errors(unscaled, hf, ids)
    scaled.pop("argmax")
    assert unscaled.pop("argmax")
    assert max(unscaled.values()) < 1e-12, unscaled
    assert max(scaled.values()) > 1e-3, scaled
    pytest.skip(
        f"transformers {transformers.__version__}'s GGUF loader reads no RoPE scaling of this "
        f"{architecture(tiny(name).config.model_type)} file (its rope_parameters: {params}): "
        f"its model equals tpde's model of the same weights unscaled to "
        f"{max(unscaled.values()):.1e} and differs from the scaled one by "
        f"{max(scaled.values()):.2g}; the folder, and the loader's weights with the "
        "checkpoint's config (the test below), are the oracles"
    )


#: name → (case of test_gguf_converted, tolerance, tokens, rope_type): the scaled files whose
#: weights transformers' loader reads; "phi3-longrope" (test_gguf_converted's: C₀ = 4, the 9
#: tokens take the long factors; partial rotary), whose LongRoPE factors and
#: rope.dimension_count the loader does not read either.
WEIGHTS = {
    **{n: (case, tolerance, L, params["rope_type"])
       for n, (case, params, _, tolerance) in SCALED.items()},
    "phi3-longrope": ("phi3", 1e-12, 9, "longrope"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_scaled_file_equals_transformers_gguf_weights_with_the_checkpoints_scaling(
    name, monkeypatch, tmp_path
):
    """The weights transformers' GGUF loader reads from the file (its own un-permutation of a
    llama file's rows), with the checkpoint's config (its ``rope_parameters``: the scaling,
    evaluated by transformers' ROPE_INIT_FUNCTIONS in float64; Phi-3's partial rotary too),
    against tpde's model of the file: within the case's tolerance (float64; measured
    ≤ 1.2e-15, phi3-longrope 9.5e-16; "llama3-ramp": the file's float32 divisors, 1e-6,
    measured 4.9e-8)."""
    _, tolerance, tokens, kind = WEIGHTS[name]
    ids = torch.randint(3, 40, (tokens,), generator=torch.Generator().manual_seed(1))
    _without_biases(name, monkeypatch)
    with _transformers_scaled(name, tmp_path, config=True) as (hf, file):
        assert hf.config.rope_parameters["rope_type"] == kind
        measured = transformers_errors(load(file, dtype=torch.float64), hf, ids)
    assert measured.pop("argmax")
    assert max(measured.values()) < tolerance, measured
