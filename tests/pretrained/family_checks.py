"""The checks every family test runs against transformers (issue 34's families, part A).

A family's test builds a tiny transformers model with EVERY parameter redrawn (the default
initialisation leaves biases at 0, norm gains at 1 and Gemma's offsets at 0, which hides the
bugs that matter), saves it with ``save_pretrained`` and hands the folder and transformers'
outputs to these checks: every hidden state and the logits within ``tol`` relative (1e-12 in
float64: the same sums in another order; 1e-5 in float32: float32 rounding through a few
layers), the greedy token identical at every position, and the per-sublayer split summing
to every layer's update (1e-12).

transformers evaluates several pieces in float32 whatever the model's dtype: RoPE tables
(and their scalings), RMSNorm, OLMo's and Cohere's LayerNorms, Gemma's √d embedding scale,
Cohere's rotation, the eager softmax. :func:`float64_oracle` re-evaluates each in float64 by
transformers' own source with its float32 casts read as float64 (:mod:`rope_oracle`) or by
its own equation; everything else is transformers' own code.
"""

from __future__ import annotations

import contextlib
import importlib

import torch

from tests.pretrained import rope_oracle
from tests.pretrained.test_load import _relative
from tests.pretrained.test_load_peri import _softmax_in_float64
from tpde.pretrained import load

__all__ = ["N", "check", "float64_oracle", "redrawn", "split_error"]

N = 9  # tokens


def _module(model_type: str):
    return importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")


def _layer_norm(x, m, offset=0.0):
    """LayerNorm without a bias (Cohere), or without any parameter (OLMo), in x's dtype."""
    eps = getattr(m, "variance_epsilon", 1e-5)  # OLMo's is fixed at 1e-5
    centred = x - x.mean(-1, keepdim=True)
    normed = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    return normed if getattr(m, "weight", None) is None else m.weight * normed


def _float64_norms(model) -> None:
    """RMSNorm (gain 1 + w for Gemma), OLMo's and Cohere's LayerNorms and Gemma's √d
    embedding scale in the model's dtype (transformers: float32)."""
    gemma = model.config.model_type.startswith("gemma")  # gains 1 + w (Gemma, -2, -3)
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RMSNorm"):

            def norm(x, m=module, offset=1.0 if gemma else 0.0):
                eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))
                scaled = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
                return (offset + m.weight) * scaled

            module.forward = norm
        elif name in ("OlmoLayerNorm", "CohereLayerNorm"):
            module.forward = lambda x, m=module: _layer_norm(x, m)
        elif name.endswith("ScaledWordEmbedding"):
            module.embed_scale = torch.tensor(model.config.hidden_size**0.5, dtype=torch.float64)


@contextlib.contextmanager
def float64_oracle(model_type: str):
    """While active: the family's RoPE (tables, scalings, Cohere's rotation) and the eager
    softmax in float64. Build and run the model inside it."""
    module = _module(model_type)
    rotary = next(v for k, v in vars(module).items() if k.endswith("RotaryEmbedding"))
    saved = module.apply_rotary_pos_emb
    if model_type == "cohere":  # Cohere rotates in float32 (q.float(), k.float())
        module.apply_rotary_pos_emb = rope_oracle.in_float64(saved)
    try:
        with rope_oracle.float64_rope(rotary), _softmax_in_float64():
            yield
    finally:
        module.apply_rotary_pos_emb = saved


def redrawn(config_cls: str, kwargs: dict, model_cls: str, seed: int):
    """The transformers model of ``kwargs``, every parameter redrawn from N(0, 0.5²), in
    float64, eager attention, its float32 pieces re-evaluated in float64 (call inside
    :func:`float64_oracle`)."""
    import transformers

    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**kwargs)
    config._attn_implementation = "eager"
    model = getattr(transformers, model_cls)(config).to(torch.float64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    _float64_norms(model)
    return model


def outputs(model, n: int = N, seed: int = 1):
    """(ids, transformers' output with hidden states) of n random tokens."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.config.vocab_size, (n,), generator=generator)
    with torch.no_grad():
        return ids, model(ids[None], output_hidden_states=True)


def check(model, ids, out, tol: float) -> dict:
    """Relative errors of every hidden state (the last one final-normed, as transformers'
    is) and of the logits, each < ``tol``; the greedy token identical at every position."""
    states = model.hidden_states(model.embed(ids)[0])
    last = len(out.hidden_states) - 1
    errors = {}
    for l, expected in enumerate(out.hidden_states):
        mine = states[l] if l < last else model.final_norm.norm(states[l])
        errors[l] = _relative(mine.double(), expected[0])
    logits = model.logits(states[-1])
    errors["logits"] = _relative(logits.double(), out.logits[0])
    assert max(errors.values()) < tol, errors
    assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))  # greedy, every position
    return errors


def split_error(folder, ids) -> float:
    """|Σ_k v_{l,k} − (x_{l+1} − x_l)| / |x_{l+1} − x_l| over every layer, in float64."""
    model = load(folder, dtype=torch.float64)
    mu = model.embed(ids)[0]
    states, split = model.hidden_states(mu), model.split(mu)
    assert split.shape == (len(model.layers), 2, len(ids), model.config.hidden)
    update = states[1:] - states[:-1]
    return float((split.sum(1) - update).norm() / update.norm())


def logits_error(model, ids, out) -> float:
    """The logits' relative error alone (for the checks that a piece matters: a model
    without it is far from transformers')."""
    logits = model.logits(model.hidden_states(model.embed(ids)[0])[-1])
    return _relative(logits.double(), out.logits[0])
