"""The comparison every new family's test makes against transformers (test oracle only).

A tiny transformers model with every parameter redrawn (default init zeroes biases and norm
offsets, which would hide a wrong bias or gain), saved as a folder, loaded by tpde in float64
and float32; compared on every hidden state, the logits, the greedy tokens and the split.
"""

from __future__ import annotations

import torch

from tests.pretrained.test_load import _exact_float64
from tpde.pretrained import load


def redraw(model, seed: int, std: float = 0.5):
    """``model`` in float64, eval mode, every parameter drawn from N(0, std²) (seeded)."""
    model = model.to(torch.float64).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(
                torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * std
            )
    return model


def relative(a, b) -> float:
    """‖a − b‖/‖b‖ (Frobenius), in float64."""
    return float((a.double() - b.double()).norm() / b.double().norm())


def compare(model, folder, ids, *, experts: bool = False) -> dict:
    """The errors of tpde's load of ``model`` (saved to ``folder``) against transformers.

    Returns
    -------
    dict
        ``"states64"``: the largest relative error over the hidden states (the last one
        final-normed, as transformers reports it), ``"logits64"``, ``"states32"`` and
        ``"logits32"`` (tpde in float32 against transformers in float64), ``"greedy"``
        (float64 argmax equal at every position, and float32's), ``"split"`` (‖Σ_k v_{l,k} −
        (x_{l+1} − x_l)‖/‖x_{l+1} − x_l‖, largest over layers) and with ``experts`` the same
        for the per-expert split ``"split_experts"``.
    """
    model.save_pretrained(folder)
    _exact_float64(model)  # transformers' RoPE tables and RMSNorm in float64, not float32
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    errors, greedy = {}, []
    for dtype, tag in ((torch.float64, "64"), (torch.float32, "32")):
        mine = load(folder, dtype=dtype)
        mu = mine.embed(ids)[0]
        states = mine.hidden_states(mu)
        worst = 0.0
        for l, expected in enumerate(out.hidden_states):
            state = states[l] if l < len(states) - 1 else mine.final_norm.norm(states[l])
            worst = max(worst, relative(state, expected[0]))
        logits = mine.logits(states[-1])
        errors[f"states{tag}"], errors[f"logits{tag}"] = worst, relative(logits, out.logits[0])
        greedy.append(bool(torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))))
        if dtype is torch.float64:
            updates = states[1:] - states[:-1]
            for key, flag in (("split", False), ("split_experts", True)):
                if flag and not experts:
                    continue
                parts = mine.split(mu, experts=flag)
                errors[key] = max(
                    relative(parts[l].sum(0), updates[l]) for l in range(len(updates))
                )
    errors["greedy"] = all(greedy)
    return errors
