"""A plain torch forward of a llama decoder (the network's own equations, no tpde fields).

Independent of tpde's fields (an oracle: it shares no code with them): the tests hold
tpde's layer schedule against it and it against transformers' ``LlamaForCausalLM``. ``w``
is a dict of torch tensors named as in a Hugging Face llama checkpoint
(:func:`tpde.pretrained.read_checkpoint`), ``cfg`` the model's config record. Tokens
are (..., n, d), positions 0 … n − 1 (one sentence per batch row, no padding).

One block l (Pre-RMSNorm), with N_γ(x) = γ ⊙ x/√(mean(x²) + ε):

    h = x + W_O concat_h softmax_causal(R_p q_h · R_p' k_{g(h)} / √k) v_{g(h)},
        q = W_Q N_γ1(x), k = W_K N_γ1(x), v = W_V N_γ1(x), g(h) = ⌊h H_kv / H⌋,
    x' = h + W_down (silu(W_gate N_γ2(h)) ⊙ W_up N_γ2(h)),

R_p the rotation by angles p·θ^(−2i/k) of the pairs (i, i + k/2) of a head ("rotate half").
"""

from __future__ import annotations

import torch

__all__ = ["attention", "block", "forward", "logits", "mlp", "rms_norm", "rope_tables", "rotate"]


def rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """N_γ(x) = γ ⊙ x/√(mean(x²) + ε) over the last dimension."""
    return gamma * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


def rope_tables(
    n: int, head_dim: int, base: float, dtype, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles p·θ^(−2i/k), shape (n, k) (each half repeated)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim
    inv = 1.0 / base**exponents
    angles = torch.arange(n, dtype=torch.float64, device=device)[:, None] * inv[None]
    angles = torch.cat([angles, angles], -1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """R_p x = x cos + rotate_half(x) sin, rotate_half(x1, x2) = (−x2, x1)."""
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + turned * sin


def attention(x, l: int, w: dict, cfg, *, probabilities: bool = False):
    """Layer l's attention sublayer on x (its RMSNorm included, no residual).

    Returns the (..., n, d) output, and with ``probabilities=True`` also the attention
    weights (..., H, n, n) (row i: the causal softmax of query i over keys j ≤ i).
    """
    n, k, H, Hkv = x.shape[-2], cfg.head_dim, cfg.heads, cfg.kv_heads
    y = rms_norm(x, w[f"model.layers.{l}.input_layernorm.weight"], cfg.rms_eps)

    def heads(weight, count):
        return (y @ weight.T).unflatten(-1, (count, k)).transpose(-2, -3)  # (..., count, n, k)

    cos, sin = rope_tables(n, k, cfg.rope_base, x.dtype, x.device)
    q = rotate(heads(w[f"model.layers.{l}.self_attn.q_proj.weight"], H), cos, sin)
    key = rotate(heads(w[f"model.layers.{l}.self_attn.k_proj.weight"], Hkv), cos, sin)
    v = heads(w[f"model.layers.{l}.self_attn.v_proj.weight"], Hkv)
    key, v = (t.repeat_interleave(H // Hkv, dim=-3) for t in (key, v))
    scores = q @ key.transpose(-1, -2) / k**0.5
    future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
    out_weight = w[f"model.layers.{l}.self_attn.o_proj.weight"]
    out = (weights @ v).transpose(-2, -3).flatten(-2) @ out_weight.T
    return (out, weights) if probabilities else out


def mlp(h, l: int, w: dict, cfg):
    """Layer l's SwiGLU sublayer on h (its RMSNorm included, no residual)."""
    y = rms_norm(h, w[f"model.layers.{l}.post_attention_layernorm.weight"], cfg.rms_eps)
    gate = torch.nn.functional.silu(y @ w[f"model.layers.{l}.mlp.gate_proj.weight"].T)
    up = y @ w[f"model.layers.{l}.mlp.up_proj.weight"].T
    return (gate * up) @ w[f"model.layers.{l}.mlp.down_proj.weight"].T


def block(x, l: int, w: dict, cfg):
    """One Pre-RMSNorm decoder block: h = x + Attn(x), x' = h + MLP(h)."""
    h = x + attention(x, l, w, cfg)
    return h + mlp(h, l, w, cfg)


def forward(ids: torch.Tensor, w: dict, cfg) -> torch.Tensor:
    """Hidden states (L + 1, ..., n, d): the embeddings, then the output of every block."""
    x = w["model.embed_tokens.weight"][ids]
    states = [x]
    for l in range(cfg.layers):
        x = block(x, l, w, cfg)
        states.append(x)
    return torch.stack(states)


def logits(x: torch.Tensor, w: dict, cfg) -> torch.Tensor:
    """Final RMSNorm then the output head (the embedding matrix when tied): (..., n, V)."""
    head = w["model.embed_tokens.weight"] if cfg.tied_embeddings else w["lm_head.weight"]
    return rms_norm(x, w["model.norm.weight"], cfg.rms_eps) @ head.T
