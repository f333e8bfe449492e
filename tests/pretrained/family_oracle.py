"""The comparison every new family's test makes against transformers (test oracle only).

A tiny transformers model with every parameter redrawn (default init zeroes biases and norm
offsets, which would hide a wrong bias or gain), saved as a folder, loaded by tpde in float64
and float32; compared on every hidden state, the logits, the greedy tokens and the split.
"""

from __future__ import annotations

import json
from pathlib import Path

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


#: float64: rounding ~1e-16 per operation through a few layers (measured ≤ 1e-15); 1e-12
#: leaves three orders of margin and still catches any wrong constant (BLOOM's 0.79788456
#: against √(2/π) is 1e-10 apart). float32 (tpde) against float64 (transformers): rounding
#: 6e-8 per operation, measured ≤ 5e-7 on these models.
TOL64, TOL32 = 1e-12, 1e-5


def assert_exact(errors: dict) -> None:
    """The tolerances of every new family's test (module notes of the constants)."""
    for key in ("states64", "logits64", "split", "split_experts"):
        assert errors.get(key, 0.0) < TOL64, errors
    assert errors["states32"] < TOL32 and errors["logits32"] < TOL32, errors
    assert errors["greedy"], errors


def float64_router(monkeypatch, router_class) -> None:
    """transformers' MoE router (Mixtral's, Qwen2-MoE's) with its softmax in the model's dtype:
    it casts the logits to float32 (``.float()``), which bounds a float64 comparison at 1e-8.
    The same code otherwise: softmax over all experts, top-k, renormalised when the router
    has no ``norm_topk_prob`` (Mixtral) or it is true."""

    def forward(self, hidden_states):
        flat = hidden_states.reshape(-1, self.hidden_dim)
        logits = torch.nn.functional.linear(flat, self.weight)
        top, index = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)
        if getattr(self, "norm_topk_prob", True):
            top = top / top.sum(dim=-1, keepdim=True)
        return logits, top, index

    monkeypatch.setattr(router_class, "forward", forward)


def float64_softmax(monkeypatch) -> None:
    """``torch.nn.functional.softmax`` keeping float64 scores in float64: BLOOM's attention
    casts them to float32 (``dtype=torch.float32``), which bounds a float64 comparison."""
    softmax = torch.nn.functional.softmax

    def kept(x, dim=None, _stacklevel=3, dtype=None):
        return softmax(x, dim) if x.dtype == torch.float64 else softmax(x, dim, dtype=dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", kept)


def edit_config(folder, **changes) -> None:
    """Rewrite ``folder``/config.json with ``changes`` (None: the key removed)."""
    path = Path(folder) / "config.json"
    raw = json.loads(path.read_text())
    raw.update(changes)
    raw = {k: v for k, v in raw.items() if v is not None}
    path.write_text(json.dumps(raw))


def unpatched_gap(model, folder, ids) -> float:
    """‖logits_tpde − logits_transformers‖/‖logits_transformers‖, tpde in float64 against
    transformers run as shipped (its float32 softmax or router unpatched): what the patches
    above remove, to be of float32's size (1e-8) and no larger."""
    model.save_pretrained(folder)
    _exact_float64(model)
    with torch.no_grad():
        expected = model(ids[None]).logits[0]
    mine = load(folder, dtype=torch.float64)
    return relative(mine.logits(mine.hidden_states(mine.embed(ids)[0])[-1]), expected)


#: Three sentences of 9 tokens (no padding token 0: each row's last token is classified).
ROWS = torch.randint(3, 40, (3, 9), generator=torch.Generator().manual_seed(1))


def compare_classes(model, folder, ids=ROWS) -> dict:
    """The errors of tpde's sequence-classification head (``class_logits`` of the last token's
    state) against a ``*ForSequenceClassification`` ``model`` on the rows of ``ids`` (B, n):
    ``"classes64"``, ``"classes32"`` (relative), ``"argmax"`` (the class equal in both
    dtypes); asserted within ``TOL64``, ``TOL32``."""
    model.save_pretrained(folder)
    _exact_float64(model)
    with torch.no_grad():
        expected = model(ids).logits
    errors, argmax = {}, []
    for dtype, tag in ((torch.float64, "64"), (torch.float32, "32")):
        mine = load(folder, dtype=dtype)
        last = torch.stack([mine.hidden_states(mine.embed(row)[0])[-1] for row in ids])
        logits = mine.class_logits(last)
        errors[f"classes{tag}"] = relative(logits, expected)
        argmax.append(bool(torch.equal(logits.argmax(-1), expected.argmax(-1))))
    errors["argmax"] = all(argmax)
    assert errors["classes64"] < TOL64 and errors["classes32"] < TOL32 and all(argmax), errors
    return errors
