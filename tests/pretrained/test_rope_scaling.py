"""RoPE scalings against transformers' ``ROPE_INIT_FUNCTIONS``, and how configs are read.

The oracle is transformers' own function with its float32 casts read as float64
(tests/pretrained/rope_oracle.py), called on a transformers config built from the same dict
that tpde reads. Tolerance: 1e-12 relative on θ' (both float64; the same operations, at most
in another order: a few ulps) and on α; the float32 original is checked to be within 1e-6,
so that the oracle is the same formula.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.pretrained.rope_oracle import init_functions_in_float64
from tpde.fields import (
    DynamicNTK,
    LinearScaling,
    Llama3Scaling,
    LongRoPE,
    YaRN,
    rope_scaling_from_config,
)
from tpde.pretrained import LoadError

transformers = pytest.importorskip("transformers")

TOL = 1e-12


def _factors(n: int, seed: int) -> list[float]:
    g = torch.Generator().manual_seed(seed)
    return (1 + 3 * torch.rand(n, generator=g, dtype=torch.float64)).tolist()


#: name → (rope_parameters, head_dim, max_position_embeddings, partial_rotary_factor, lengths)
CASES = {
    "linear-gemma3": ({"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}, 256, 131072,
                      1.0, (None,)),
    "linear-partial": ({"rope_type": "linear", "factor": 2.5, "rope_theta": 1e4}, 16, 64, 0.5,
                       (None,)),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}, 64, 2048, 1.0,
                (100, 2048, 2049, 3000, 10000)),
    "dynamic-partial": ({"rope_type": "dynamic", "factor": 3.3, "rope_theta": 500.0}, 16, 32,
                        0.5, (31, 32, 33, 97)),
    "llama3.1": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                  "rope_theta": 500000.0}, 128, 131072, 1.0, (None,)),
    "llama3.2": ({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                  "rope_theta": 500000.0}, 64, 131072, 1.0, (None,)),
    "llama3-tiny": ({"rope_type": "llama3", "factor": 3.0, "low_freq_factor": 0.5,
                     "high_freq_factor": 2.5, "original_max_position_embeddings": 64,
                     "rope_theta": 1e4}, 8, 256, 1.0, (None,)),
    "yarn-qwen2.5": ({"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 32768, "rope_theta": 1e6}, 128,
                     131072, 1.0, (None,)),
    "yarn-deepseek": ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings":
                       4096, "beta_fast": 32, "beta_slow": 1, "mscale": 0.707,
                       "mscale_all_dim": 1.3, "rope_theta": 1e4}, 64, 163840, 1.0, (None,)),
    "yarn-given": ({"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 48,
                    "beta_fast": 8.0, "beta_slow": 2.0, "attention_factor": 0.9,
                    "truncate": False, "rope_theta": 100.0}, 16, 128, 0.5, (None,)),
    "yarn-no-factor": ({"rope_type": "yarn", "factor": None,
                        "original_max_position_embeddings": 32, "rope_theta": 1e4}, 8, 96, 1.0,
                       (None,)),
    "longrope-phi3": ({"rope_type": "longrope", "short_factor": _factors(48, 1),
                       "long_factor": _factors(48, 2), "original_max_position_embeddings": 4096,
                       "rope_theta": 1e4}, 96, 131072, 1.0, (None, 4096, 4097, 9000)),
    "longrope-given": ({"rope_type": "longrope", "short_factor": _factors(4, 3),
                        "long_factor": _factors(4, 4), "original_max_position_embeddings": 32,
                        "factor": 5.0, "attention_factor": 1.2, "rope_theta": 50.0}, 16, 64, 0.5,
                       (10, 32, 33)),
}  # fmt: skip


def _config(params: dict, head_dim: int, context: int, fraction: float, **top):
    params = {**params, "partial_rotary_factor": fraction} if fraction != 1.0 else dict(params)
    return transformers.LlamaConfig(
        hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
        max_position_embeddings=context, rope_parameters=params, **top,
    )  # fmt: skip


def _relative(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.fixture(scope="module")
def oracle():
    return init_functions_in_float64()


@pytest.mark.parametrize("name", list(CASES))
def test_frequencies_and_attention_factor_equal_transformers(name, oracle):
    params, head_dim, context, fraction, lengths = CASES[name]
    config = _config(params, head_dim, context, fraction)
    dims = int(head_dim * fraction)
    scaling, local = rope_scaling_from_config(config.to_dict(), context=context, dims=dims)
    assert local is scaling and scaling.name == params["rope_type"]
    base = params["rope_theta"]
    function = oracle[params["rope_type"]]
    for length in lengths:
        # dynamic: max(L, C) in the function is dynamic_rope_update's rule; longrope: L > C₀
        inv, alpha = function(config, None, seq_len=length)
        mine = scaling.frequencies(base, dims, length)
        assert inv.dtype == torch.float64 and mine.shape == inv.shape
        assert _relative(mine, inv) < TOL, (name, length)
        assert abs(scaling.attention_scaling - alpha) <= TOL * abs(alpha)
    # the oracle is transformers' formula: its float32 original agrees to float32 rounding
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv32, alpha32 = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, None, seq_len=lengths[-1])
    assert _relative(scaling.frequencies(base, dims, lengths[-1]), inv32.double()) < 1e-6
    assert abs(scaling.attention_scaling - alpha32) < 1e-6


def test_the_scalings_change_what_they_should():
    """Closed forms: linear divides every θ by s; llama3 keeps the fastest pair and divides
    the slowest; dynamic NTK is RoPE up to C; LongRoPE switches tables just past C₀."""
    theta = LinearScaling(1.0).frequencies(1e4, 8)
    assert _relative(LinearScaling(4.0).frequencies(1e4, 8), theta / 4) < TOL
    llama = Llama3Scaling(8.0, 64, 1.0, 4.0).frequencies(1e4, 8)
    assert float(llama[0]) == float(theta[0]) and _relative(llama[-1:], theta[-1:] / 8) < TOL
    dynamic = DynamicNTK(2.0, 32)
    assert _relative(dynamic.frequencies(1e4, 8, 32.0), theta) < TOL
    assert float(dynamic.frequencies(1e4, 8, 64.0)[-1]) < float(theta[-1])
    long = LongRoPE([1.0] * 4, [2.0] * 4, 32, 4.0)
    assert _relative(long.frequencies(1e4, 8, 32.0), theta) < TOL
    assert _relative(long.frequencies(1e4, 8, 33.0), theta / 2) < TOL
    assert abs(long.attention_scaling - math.sqrt(1 + math.log(4) / math.log(32))) < TOL
    assert YaRN(1.0, 32).attention_scaling == 1.0


def test_top_level_original_context_wins_as_in_transformers(oracle):
    """Phi-3 keeps C₀ at the top of config.json; transformers prefers it to the dict's."""
    params = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
              "rope_theta": 1e4}  # fmt: skip
    config = _config(params, 8, 128, 1.0, original_max_position_embeddings=40)
    raw = {"rope_parameters": dict(params), "original_max_position_embeddings": 40}
    scaling, _ = rope_scaling_from_config(raw, context=128, dims=8)
    assert scaling.original_context == 40
    assert _relative(scaling.frequencies(1e4, 8), oracle["yarn"](config, None)[0]) < TOL


def test_legacy_rope_scaling_and_type_spelling():
    legacy = {"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 1e4}
    assert rope_scaling_from_config(legacy, context=32, dims=8)[0] == LinearScaling(2.0)
    both = {**legacy, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}
    assert rope_scaling_from_config(both, context=32, dims=8)[0] == LinearScaling(2.0)
    assert rope_scaling_from_config({}, context=32, dims=8) == (None, None)


def test_gemma3_per_layer_type():
    """Gemma-3: the global layers scaled, the local ones not (transformers 5 and 4 forms)."""
    nested = {"rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}  # fmt: skip
    assert rope_scaling_from_config(nested, context=32, dims=8, per_layer_type=True) == (
        LinearScaling(8.0), None)  # fmt: skip
    legacy = {"rope_scaling": {"rope_type": "linear", "factor": 8.0}, "rope_theta": 1e6,
              "rope_local_base_freq": 1e4}  # fmt: skip
    assert rope_scaling_from_config(legacy, context=32, dims=8, per_layer_type=True) == (
        LinearScaling(8.0), None)  # fmt: skip
    config = transformers.Gemma3TextConfig(rope_scaling={"rope_type": "linear", "factor": 8.0})
    scalings = rope_scaling_from_config(
        config.to_dict(), context=config.max_position_embeddings, dims=256, per_layer_type=True
    )
    assert scalings == (LinearScaling(8.0), None)


# ---------------------------------------------------------------------- bad configs
_BAD = {
    "not a dict": ({"rope_parameters": "oops"}, r"rope_parameters must be a dict.*'oops'"),
    "legacy not a dict": ({"rope_scaling": [2.0]}, r"rope_scaling must be a dict.*\[2\.0\]"),
    "unknown type": ({"rope_parameters": {"rope_type": "su"}},
                     r"rope_parameters\.rope_type = 'su'.*'linear', 'dynamic'"),
    "type not a string": ({"rope_parameters": {"rope_type": ["yarn"]}},
                          r"rope_type = \['yarn'\] is a RoPE scaling"),
    "factor zero": ({"rope_parameters": {"rope_type": "linear", "factor": 0}},
                    r"rope_parameters\.factor must be finite and > 0; received 0"),
    "factor negative": ({"rope_scaling": {"type": "dynamic", "factor": -2.0}},
                        r"rope_scaling\.factor must be finite and > 0; received -2\.0"),
    "factor a string": ({"rope_parameters": {"rope_type": "linear", "factor": "8"}},
                        r"rope_parameters\.factor must be a number; received '8'"),
    "factor missing": ({"rope_parameters": {"rope_type": "linear"}},
                       r"rope_parameters\.factor is missing.*'linear'"),
    "no original, llama3": ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
                            r"original_max_position_embeddings is missing.*'llama3'"),
    "no original, yarn": ({"rope_scaling": {"type": "yarn", "factor": 4.0}},
                          r"rope_scaling\.original_max_position_embeddings is missing"),
    "original not an integer": ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 8.5}},
                                r"original_max_position_embeddings must be a positive integer"),
    "llama3 levels": ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0,
                                           "original_max_position_embeddings": 16,
                                           "low_freq_factor": 4.0, "high_freq_factor": 1.0}},
                      r"'llama3' RoPE scaling\): .*high_freq_factor > low_freq_factor"),
    "longrope too short": ({"rope_parameters": {"rope_type": "longrope",
                                                "short_factor": [1.0, 1.0, 1.0],
                                                "long_factor": [1.0] * 4,
                                                "original_max_position_embeddings": 16}},
                           r"short_factor has 3 factors.*r = 8 has 4 pairs"),
    "longrope not a list": ({"rope_parameters": {"rope_type": "longrope", "short_factor": 2.0,
                                                 "long_factor": [1.0] * 4,
                                                 "original_max_position_embeddings": 16}},
                            r"short_factor must be a list of numbers; received 2\.0"),
    "longrope factor zero": ({"rope_parameters": {"rope_type": "longrope",
                                                  "short_factor": [1.0, 0.0, 1.0, 1.0],
                                                  "long_factor": [1.0] * 4,
                                                  "original_max_position_embeddings": 16}},
                             r"short_factor\[1\] must be finite and > 0"),
    "unread key": ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "beta_fast": 3}},
                   r"holds \['beta_fast'\], which 'linear' RoPE does not read"),
    "default with a factor": ({"rope_parameters": {"rope_type": "default", "factor": 2.0}},
                              r"holds \['factor'\], which 'default' RoPE does not read"),
    "yarn truncate": ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "truncate": 1,
                                           "original_max_position_embeddings": 16}},
                      r"truncate must be true or false; received 1"),
    "nested on one-RoPE model": ({"rope_parameters": {"full_attention": {"rope_type": "linear",
                                                                         "factor": 2.0}}},
                                 r"per layer type \(full_attention\).*one RoPE for every layer"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(_BAD))
def test_bad_rope_configs_are_refused_naming_the_key(name):
    raw, match = _BAD[name]
    with pytest.raises(LoadError, match=match):
        rope_scaling_from_config(raw, context=64, dims=8, error=LoadError)


def test_per_layer_type_refusals():
    flat = {"rope_parameters": {"rope_type": "linear", "factor": 8.0}}
    with pytest.raises(ValueError, match=r"rope_type is set on the whole of a model whose"):
        rope_scaling_from_config(flat, context=64, dims=8, per_layer_type=True)
    mixed = {"rope_parameters": {"full_attention": {}, "factor": 2.0}}
    with pytest.raises(ValueError, match=r"beside them it holds \['factor'\]"):
        rope_scaling_from_config(mixed, context=64, dims=8, per_layer_type=True)
    odd = {"rope_parameters": {"full_attention": "linear"}}
    with pytest.raises(ValueError, match=r"rope_parameters\.full_attention must be a dict"):
        rope_scaling_from_config(odd, context=64, dims=8, per_layer_type=True)
