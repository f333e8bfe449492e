"""tpde.pretrained.load against transformers for the Peri-LN / output-norm families.

Gemma-2, Gemma-3 (text) and OLMo-2, as in ``test_load.py``: a tiny config, EVERY parameter
redrawn at random (norm offsets included: Gemma's gains are 1 + w, so w = 0 would hide a
missing offset), ``save_pretrained``, loaded by tpde from the folder. transformers evaluates
RMSNorm, RoPE and the √d embedding scale in float32 whatever the model's dtype: for the
float64 oracle those are re-evaluated in float64 by their own equations
(:func:`_exact_float64`); everything else is transformers' own code (eager attention, so
that Gemma-2's score soft-cap is transformers' own).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from tests.pretrained.gguf_cases import SMALL
from tests.pretrained.test_load import N, _relative
from tpde.fields import GroupedQueryAttention, Sandwich
from tpde.pretrained import load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

#: family → its GGUF case (config class, config, model class, llama.cpp's architecture;
#: tests/pretrained/gguf_cases.py):
#: head_dim 256 ≠ d/H, the window 3 shorter than the tokens.
_GGUF_GEMMA = {**SMALL, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 256,
               "query_pre_attn_scalar": 256, "sliding_window": 3}  # fmt: skip
GGUF_CASES = {
    "gemma2": ("Gemma2Config", _GGUF_GEMMA, "Gemma2ForCausalLM", "gemma2"),
    "gemma3": (
        "Gemma3TextConfig",
        {**_GGUF_GEMMA, "num_hidden_layers": 3},
        "Gemma3ForCausalLM",
        "gemma3",
    ),
    "olmo2": ("Olmo2Config", {**SMALL, "tie_word_embeddings": False}, "Olmo2ForCausalLM", "olmo2"),
}


def _exact_float64(model) -> None:
    """RMSNorm (gain 1 + w for Gemma), the RoPE tables of every layer type and Gemma's
    embedding scale in the model's dtype."""
    gemma = "gemma" in model.config.model_type
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RMSNorm"):

            def norm(x, m=module, offset=1.0 if gemma else 0.0):
                eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))
                scaled = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                return (offset + m.weight) * scaled

            module.forward = norm
        elif name.endswith("RotaryEmbedding"):
            module.forward = _rope(model.config, module)
        elif name.endswith("ScaledWordEmbedding"):
            module.embed_scale = torch.tensor(model.config.hidden_size**0.5, dtype=torch.float64)


@contextlib.contextmanager
def _softmax_in_float64():
    """transformers' eager attention takes its softmax in float32 (``dtype=torch.float32``):
    for float64 scores, in float64 instead while the oracle runs."""
    original = torch.nn.functional.softmax

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        return original(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype)

    torch.nn.functional.softmax = softmax
    try:
        yield
    finally:
        torch.nn.functional.softmax = original


def _rope(config, module):
    params = config.rope_parameters
    dim = config.head_dim

    def rope(x, position_ids, layer_type=None):
        base = (params[layer_type] if layer_type is not None else params)["rope_theta"]
        inv = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        angles = position_ids[..., None].double() * inv
        angles = torch.cat([angles, angles], -1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    return rope


_SMALL = {"vocab_size": 40, "num_hidden_layers": 4, "max_position_embeddings": 32,
          "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 8}  # fmt: skip
_GEMMA = {**_SMALL, "sliding_window": 3, "query_pre_attn_scalar": 6, "attention_bias": True}

#: family → (config class, config, model class, pieces exercised)
FAMILIES = {
    "gemma2": ("Gemma2Config", {**_GEMMA, "attn_logit_softcapping": 2.0,
                                "final_logit_softcapping": 3.0}, "Gemma2ForCausalLM",
               "sandwich RMSNorm (1 + w), √d embedding, GeGLU-tanh, query_pre_attn_scalar, "
               "local/global alternating (window 3), score and logit soft-caps"),
    "gemma3": ("Gemma3TextConfig", {**_GEMMA, "num_hidden_layers": 3, "sliding_window_pattern": 3,
                                    "rope_theta": 50.0, "rope_local_base_freq": 7.0},
               "Gemma3ForCausalLM",
               "as gemma2 without caps; per-head QK-norm (1 + w); 2 local : 1 global, local "
               "RoPE base"),
    "olmo2": ("Olmo2Config", {**_SMALL, "num_hidden_layers": 2, "tie_word_embeddings": False},
              "Olmo2ForCausalLM", "output norm only, QK-RMSNorm over the whole projection"),
}  # fmt: skip


def _oracle(family: str):
    config_cls, kwargs, model_cls, _ = FAMILIES[family]
    torch.manual_seed(sum(map(ord, family)))
    config = getattr(transformers, config_cls)(**kwargs)
    config._attn_implementation = "eager"
    model = getattr(transformers, model_cls)(config).to(torch.float64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    _exact_float64(model)
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def case(request, tmp_path_factory):
    return _saved(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    return _saved("gemma3", tmp_path_factory)


def _saved(family: str, tmp_path_factory):
    """(family, folder, ids, transformers' output) of a saved random tiny model."""
    model = _oracle(family)
    folder = tmp_path_factory.mktemp(family)
    model.save_pretrained(folder)
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), _softmax_in_float64():
        out = model(ids[None], output_hidden_states=True)
    return family, folder, ids, out


def _check(model, ids, out, tol: float) -> dict:
    mu = model.embed(ids)[0]
    states = model.hidden_states(mu)
    errors = {}
    for l, expected in enumerate(out.hidden_states):
        mine = states[l] if l < len(out.hidden_states) - 1 else model.final_norm.norm(states[l])
        errors[l] = _relative(mine.double(), expected[0])
    logits = model.logits(states[-1])
    errors["logits"] = _relative(logits.double(), out.logits[0])
    assert max(errors.values()) < tol, errors
    assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))  # greedy, every position
    return errors


def test_float64_equals_transformers(case):
    family, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == family
    _check(model, ids, out, 1e-12)


def test_float32_within_1e5(case):
    _, folder, ids, out = case
    _check(load(folder), ids, out, 1e-5)


def test_split_sums_to_every_layer_update(case):
    _, folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    mu = model.embed(ids)[0]
    states, split = model.hidden_states(mu), model.split(mu)
    assert split.shape == (len(model.layers), 2, N, model.config.hidden)
    update = states[1:] - states[:-1]
    assert float((split.sum(1) - update).norm() / update.norm()) < 1e-12


def test_layers_are_the_pieces(case):
    """Sandwich norms on both sublayers; Gemma's local layers windowed with their own base."""
    family, folder, _, _ = case
    model = load(folder, dtype=torch.float64)
    for layer in model.layers:
        assert isinstance(layer.attention_norm, Sandwich)
        assert isinstance(layer.mlp_norm, Sandwich)
        assert (layer.attention_norm.pre is None) == (family == "olmo2")
        assert isinstance(layer.attention, GroupedQueryAttention)
    if family == "gemma2":
        windows = [layer.attention.window for layer in model.layers]
        assert windows == [3, None, 3, None]
        assert all(layer.attention.softcap == 2.0 for layer in model.layers)
        assert model.logit_cap == 3.0
        assert model.embedding.scale == 16**0.5
    if family == "gemma3":
        bases = [layer.attention.position.base for layer in model.layers]
        assert bases == [7.0, 7.0, 50.0]
        assert [layer.attention.window for layer in model.layers] == [3, 3, None]
        assert model.layers[0].attention.q_norm.gamma.shape == (8,)
    if family == "olmo2":
        assert model.layers[0].attention.q_norm.gamma.shape == (32,)
        assert model.layers[0].attention.k_norm.gamma.shape == (16,)


def test_local_window_hides_far_keys(case):
    family, folder, ids, _ = case
    if family == "olmo2":
        pytest.skip("OLMo-2 has no local layers")
    model = load(folder, dtype=torch.float64)
    weights = model.attention_weights(model.embed(ids)[0].points, 0)
    assert float(weights[:, 5, :3].abs().max()) == 0 and float(weights[:, 5, 3:6].min()) > 0


# ---------------------------------------------------------------------- config.json forms
NULL = object()  # _rewrite: the key set to a JSON null


def _rewrite(folder, target, **changes):
    """A copy of the checkpoint ``folder`` in ``target`` with config.json keys changed
    (a value None removes the key, :data:`NULL` writes a JSON null)."""
    import json
    import shutil

    shutil.copytree(folder, target)
    raw = json.loads((target / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        elif value is NULL:
            raw[key] = None
        else:
            raw[key] = value
    (target / "config.json").write_text(json.dumps(raw))
    return target


def test_gemma3_checkpoint_config_of_transformers_4(gemma3, tmp_path):
    """The keys real Gemma-3 checkpoints carry (rope_theta, rope_local_base_freq,
    sliding_window_pattern; no layer_types, no rope_parameters) give the same model."""
    _, folder, ids, out = gemma3
    old = _rewrite(folder, tmp_path / "v4", layer_types=None, rope_parameters=None,
                   rope_theta=50.0, rope_local_base_freq=7.0, sliding_window_pattern=3,
                   rope_scaling=None)  # fmt: skip
    model = load(old, dtype=torch.float64)
    assert [layer.attention.position.base for layer in model.layers] == [7.0, 7.0, 50.0]
    _check(model, ids, out, 1e-12)


def test_gemma_window_absent_is_the_config_class_default(gemma3, tmp_path):
    """Gemma2Config's and Gemma3Config's sliding_window defaults to 4096 (before: refused)."""
    _, folder, _, _ = gemma3
    path = _rewrite(folder, tmp_path / "v", sliding_window=None)
    assert transformers.AutoConfig.from_pretrained(path).sliding_window == 4096
    assert load(path).config.window == 4096


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"rope_parameters": {"rope_type": "linear", "factor": 8.0}},
         "rope_parameters.rope_type is set on the whole of a model whose layers have a RoPE "
         "per type"),
        ({"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
         "layer_types"),
        ({"layer_types": ["full_attention"]}, "one type per layer"),
        ({"query_pre_attn_scalar": None}, "query_pre_attn_scalar"),
        ({"final_logit_softcapping": -1.0}, "final_logit_softcapping must be finite and > 0"),
        ({"hidden_activation": "gelu_quick"}, "hidden_activation = 'gelu_quick'"),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ({"sliding_window": NULL}, "no sliding_window"),
    ],
)  # fmt: skip
def test_gemma_keys_tpde_cannot_honour_are_refused(gemma3, tmp_path, changes, match):
    """(An explicit null window on local layers: transformers' sliding mask refuses it too.)"""
    _, folder, _, _ = gemma3
    from tpde.pretrained import LoadError

    bad = _rewrite(folder, tmp_path / "bad", **changes)
    with pytest.raises(LoadError, match=match):
        load(bad)
