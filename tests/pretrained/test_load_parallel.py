"""Parallel attention + MLP blocks (GPT-NeoX/Pythia, Phi, GPT-J) against transformers.

As tests/pretrained/test_load.py: a tiny model of each family with every parameter redrawn,
saved with ``save_pretrained`` and loaded by tpde; every hidden state and the logits within
1e-12 relative in float64 and 1e-5 in float32, the greedy token identical at every
position, and the per-sublayer split (attention and MLP velocities at the same x) summing to
every layer's update to 1e-12. GPT-J's sinusoid table is formed in float32 by transformers;
for the float64 oracle it is re-formed in float64 (its own equation, :func:`_gptj_float64`).
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.pretrained.gguf_cases import SMALL
from tests.pretrained.test_load import _exact_float64, _relative
from tpde.fields import Parallel
from tpde.pretrained import load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

#: family → its GGUF case (config class, config, model class, llama.cpp's architecture;
#: tests/pretrained/gguf_cases.py).
_GGUF_NEOX = {k: v for k, v in SMALL.items() if k != "num_key_value_heads"}
GGUF_CASES = {
    "phi": (
        "PhiConfig",
        {**_GGUF_NEOX, "intermediate_size": 128, "partial_rotary_factor": 0.5},
        "PhiForCausalLM",
        "phi2",
    ),
    "gpt_neox": (
        "GPTNeoXConfig",
        {**_GGUF_NEOX, "rotary_pct": 0.5},
        "GPTNeoXForCausalLM",
        "gptneox",
    ),
}

N = 9
_NEOX = {"vocab_size": 40, "num_hidden_layers": 2, "max_position_embeddings": 32,
         "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 2}  # fmt: skip

#: family → (config class, config, model class, pieces exercised, parallel)
FAMILIES = {
    "gpt_neox": ("GPTNeoXConfig", {**_NEOX, "rotary_pct": 0.5}, "GPTNeoXForCausalLM",
                 "parallel block, two LayerNorms, fused QKV per head, RoPE on 4 of 8", True),
    "gpt_neox-sequential": ("GPTNeoXConfig", {**_NEOX, "use_parallel_residual": False,
                                              "rotary_pct": 0.25}, "GPTNeoXForCausalLM",
                            "use_parallel_residual false: the sequential block", False),
    "phi": ("PhiConfig", {**_NEOX, "num_attention_heads": 4, "partial_rotary_factor": 0.5},
            "PhiForCausalLM", "one norm, RoPE on 2 of 4, head bias, final LayerNorm", True),
    "phi-qk": ("PhiConfig", {**_NEOX, "num_attention_heads": 2, "partial_rotary_factor": 0.5,
                             "qk_layernorm": True, "layer_norm_eps": 0.3}, "PhiForCausalLM",
               "qk_layernorm: per-head LayerNorm (gain, bias, eps 0.3) before RoPE on 4 of 8",
               True),
    "gptj": ("GPTJConfig", {"vocab_size": 40, "n_layer": 2, "n_positions": 32, "n_embd": 16,
                            "n_head": 2, "rotary_dim": 4, "bos_token_id": 0,
                            "eos_token_id": 0}, "GPTJForCausalLM",
             "one norm, interleaved RoPE on 4 of 8, no Q/K/V/O biases, head bias", True),
}  # fmt: skip


def _gptj_float64(model) -> None:
    """GPT-J's sinusoid table [sin | cos](p·θ_m) in float64 (transformers: float32)."""
    for module in model.modules():
        if type(module).__name__ == "GPTJRotaryEmbedding":
            dims = module.embed_positions.shape[-1]
            inv = 10000.0 ** (-torch.arange(0, dims, 2, dtype=torch.float64) / dims)
            angles = torch.arange(module.max_positions, dtype=torch.float64)[:, None] * inv
            module.embed_positions = torch.cat([angles.sin(), angles.cos()], 1)


def _oracle(family: str):
    config_cls, kwargs, model_cls, _, _ = FAMILIES[family]
    torch.manual_seed(sum(map(ord, family)))
    config = getattr(transformers, config_cls)(**kwargs)
    model = getattr(transformers, model_cls)(config).to(torch.float64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    if family == "gptj":
        _gptj_float64(model)  # its own table; no RMSNorm
    else:
        _exact_float64(model)
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def case(request, tmp_path_factory):
    family = request.param
    model = _oracle(family)
    folder = tmp_path_factory.mktemp(family)
    model.save_pretrained(folder)
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    return family, folder, ids, out


def _check(model, ids, out, tol: float) -> dict:
    mu = model.embed(ids)[0]
    states = model.hidden_states(mu)
    errors = {}
    for l, expected in enumerate(out.hidden_states):
        mine = states[l]
        if l == len(out.hidden_states) - 1:  # transformers' last state is the normed one
            mine = model.final_norm.norm(mine)
        errors[l] = _relative(mine.double(), expected[0])
    logits = model.logits(states[-1])
    errors["logits"] = _relative(logits.double(), out.logits[0])
    assert max(errors.values()) < tol, errors
    assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))  # greedy, every position
    return errors


def test_float64_equals_transformers(case):
    family, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == family.split("-")[0]
    parallel = FAMILIES[family][4]
    assert all(isinstance(layer.field.parts[0], Parallel) == parallel for layer in model.layers)
    assert len(model.layers[0].field.parts) == (1 if parallel else 2)
    _check(model, ids, out, 1e-12)


def test_float32_within_1e5(case):
    _, folder, ids, out = case
    _check(load(folder), ids, out, 1e-5)


def test_split_sums_to_every_layer_update(case):
    family, folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    mu = model.embed(ids)[0]
    states, split = model.hidden_states(mu), model.split(mu)
    assert split.shape == (len(model.layers), 2, N, model.config.hidden)
    update = states[1:] - states[:-1]
    assert float((split.sum(1) - update).norm() / update.norm()) < 1e-12
    layer = model.layers[0]  # the attention velocity is the attention of N₁(x₀) …
    seen = layer.attention_norm.norm(mu.points)
    attention = layer.attention.velocity(mu.with_points(seen))
    assert _relative(split[0, 0], attention) < 1e-14
    # … the MLP too, at x₀ for a parallel block, at x₀ + attention for a sequential one
    mlp = layer.mlp.velocity(mu.with_points(layer.mlp_norm.norm(mu.points)))
    if FAMILIES[family][4]:
        assert _relative(split[0, 1], mlp) < 1e-14
    else:
        assert _relative(split[0, 1], mlp) > 1e-3


def test_phi_qk_layernorm_is_a_per_head_layernorm(case):
    """Phi's qk_layernorm: q = LN_q(W_q x + b_q) over each head's d_h coordinates (gain and
    bias of size d_h, eps layer_norm_eps), before the partial rotary; without the key the
    attention has no QK-norm (and the oracle without its norms is another model)."""
    from tpde.fields import LayerNorm

    family, folder, _, _ = case
    if not family.startswith("phi"):
        pytest.skip("Phi only")
    model = load(folder, dtype=torch.float64)
    attention = model.layers[1].attention
    if family == "phi":
        assert attention.q_norm is None and attention.k_norm is None
        return
    for norm in (attention.q_norm, attention.k_norm):
        assert isinstance(norm, LayerNorm) and norm.placement == "pre"
        assert norm.gamma.shape == norm.bias.shape == (8,) and norm.eps == 0.3
    import json

    raw = json.loads((folder / "config.json").read_text())
    try:
        (folder / "config.json").write_text(json.dumps({**raw, "qk_layernorm": False}))
        from tpde.pretrained import LoadError

        with pytest.raises(
            LoadError,
            match=r"tensor 'model.layers.\d.self_attn.[qk]_layernorm."
            r"(weight|bias)' \(shape \(8,\)\) is not one a phi",
        ):
            load(folder)
        (folder / "config.json").write_text(json.dumps({**raw, "qk_layernorm": "yes"}))
        message = f"{folder}: config.json: qk_layernorm must be true or false; received 'yes'"
        with pytest.raises(LoadError, match=re.escape(message)):
            load(folder)
    finally:
        (folder / "config.json").write_text(json.dumps(raw))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("use_parallel_residual", "yes", "use_parallel_residual must be true or false; "
                                         "received 'yes'"),
        ("partial_rotary_factor", 0.2, r"partial_rotary_factor = 0.2 rotates 1 coordinates of "
                                       r"heads of dimension 8; RoPE rotates an even number"),
        ("partial_rotary_factor", 1.5, r"partial_rotary_factor must lie in \(0, 1\]; "
                                       "received 1.5"),
        ("rope_type", "su", "rope_parameters.rope_type = 'su' is a RoPE scaling tpde does not "
                            "implement"),
        ("rope_type", "linear", r"rope_parameters\.factor is missing, and 'linear'"),
    ],
)  # fmt: skip
def test_config_keys_tpde_cannot_honour_are_refused(tmp_path, key, value, message):
    import json

    from tpde.pretrained import LoadError

    _oracle("gpt_neox").save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    if key in raw["rope_parameters"]:
        raw["rope_parameters"][key] = value
    else:
        raw[key] = value
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(LoadError, match=message):
        load(tmp_path)


def test_gptj_rotary_dim_must_be_even(tmp_path):
    import json

    from tpde.pretrained import LoadError

    _oracle("gptj").save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "rotary_dim": 3}))
    with pytest.raises(LoadError, match="rotary_dim = 3 rotates 3 coordinates"):
        load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**raw, "rotary_dim": None}))
    assert load(tmp_path).layers[0].attention.position.dims is None  # null: the whole head


@pytest.mark.parametrize(
    ("family", "keys"),
    [
        ("gpt_neox", {"rotary_pct": 0.5, "rotary_emb_base": 10000.0}),
        ("phi", {"partial_rotary_factor": 0.5, "rope_theta": 10000.0}),
    ],
)
def test_transformers_4_configs_read_alike(tmp_path, family, keys):
    """Checkpoints saved by transformers 4 (Pythia, Phi-2 on the hub) keep the rotary
    fraction and base at the top level, without rope_parameters: the same model."""
    import json

    model = _oracle(family)
    model.save_pretrained(tmp_path)
    ids = torch.arange(3, 3 + N)
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    raw = json.loads((tmp_path / "config.json").read_text())
    del raw["rope_parameters"]
    (tmp_path / "config.json").write_text(json.dumps({**raw, **keys}))
    loaded = load(tmp_path, dtype=torch.float64)
    assert loaded.layers[0].attention.position.dims == (4 if family == "gpt_neox" else 2)
    _check(loaded, ids, out, 1e-12)
    raw = {**raw, **keys, next(iter(keys)): 1.0}  # the whole head: another model
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(AssertionError):
        _check(load(tmp_path, dtype=torch.float64), ids, out, 1e-12)
