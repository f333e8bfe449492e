"""model_structure on tiny random models loaded by tpde.pretrained.load (MATH.md §12).

Two families read from their own files: Llama (GQA 4/2, RoPE, causal, all four attention
biases, Pre-RMSNorm) and BERT (Post-LayerNorm encoder, biases, no positions in the scores).
The weights-only scores are checked against Saponati et al.'s formulas applied to the
transformers model's own q_proj/k_proj rows (an independent read of the checkpoint); the
dynamic part against the network's own per-sublayer split. Random weights are not
structured: every head is far (> 0.1).
"""

from __future__ import annotations

import pytest
import torch

from tpde.fields import nearest_gradient_field
from tpde.measures import Empirical
from tpde.pretrained import DepthEnergies, ModelStructure, depth_energies, load, model_structure

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

F64 = torch.float64
N = 9
FAR = 0.1
_SMALL = {"vocab_size": 40, "num_hidden_layers": 2, "max_position_embeddings": 32,
          "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4}  # fmt: skip
FAMILIES = {
    "llama": ("LlamaConfig", {**_SMALL, "num_key_value_heads": 2, "attention_bias": True,
                              "tie_word_embeddings": False}, "LlamaForCausalLM"),
    "bert": ("BertConfig", _SMALL, "BertModel"),
}  # fmt: skip


@pytest.fixture(scope="module", params=list(FAMILIES))
def case(request, tmp_path_factory):
    family = request.param
    config_cls, kwargs, model_cls = FAMILIES[family]
    torch.manual_seed(sum(map(ord, family)))
    oracle = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**kwargs))
    oracle = oracle.to(F64).eval()
    with torch.no_grad():
        for parameter in oracle.parameters():
            parameter.normal_(0.0, 0.5)
    folder = tmp_path_factory.mktemp(family)
    oracle.save_pretrained(folder)
    model = load(folder, dtype=F64)
    mu = model.embed(torch.arange(3, 3 + N))[0]
    return family, oracle, model, mu, model_structure(model, mu), depth_energies(model, mu)


def _saponati_symmetry(A):
    SYM = 0.5 * (A + A.T)
    return (SYM**2).sum() / (A**2).sum()


def _query_key_rows(oracle, family: str, layer: int):
    """(W_Q, W_K) of every query head, from the transformers modules (repeat_kv order)."""
    if family == "llama":
        attention = oracle.model.layers[layer].self_attn
        q, k = attention.q_proj.weight, attention.k_proj.weight
        heads, kv = oracle.config.num_attention_heads, oracle.config.num_key_value_heads
    else:
        attention = oracle.encoder.layer[layer].attention.self
        q, k = attention.query.weight, attention.key.weight
        heads = kv = oracle.config.num_attention_heads
    dh = q.shape[0] // heads
    return [
        (q[h * dh : (h + 1) * dh], k[(h // (heads // kv)) * dh : (h // (heads // kv) + 1) * dh])
        for h in range(heads)
    ]  # fmt: skip


def test_every_layer_and_head_is_reported(case):
    _, oracle, model, _, result, _ = case
    assert isinstance(result, ModelStructure)
    layers, heads = len(model.layers), oracle.config.num_attention_heads
    assert result.places == tuple((l, 0) for l in range(layers))
    for name in ("symmetry", "directionality", "symmetry_residual", "definite_residual",
                 "dynamic_gap"):  # fmt: skip
        table = result.table(name)
        assert table.shape == (layers, heads) and bool(torch.isfinite(table).all()), name


def test_scores_equal_saponati_on_the_checkpoint_rows(case):
    family, oracle, _, _, result, _ = case
    for l in range(len(result.reports)):
        mine = result.table("symmetry")[l]
        theirs = [
            float(_saponati_symmetry((q.T @ k).detach().numpy()))
            for q, k in _query_key_rows(oracle, family, l)
        ]
        assert torch.allclose(mine, torch.tensor(theirs, dtype=F64), rtol=1e-12, atol=0)


def test_random_weights_are_far_from_the_structure(case):
    family, _, _, _, result, _ = case
    assert float(result.table("definite_residual").min()) > FAR
    assert float(result.table("dynamic_gap").min()) > FAR
    causal = any("causal mask" in b for b in result.reports[0].breaks)
    rope = any("RoPE" in b for b in result.reports[0].breaks)
    assert causal == rope == (family == "llama")


def test_dynamic_gap_reads_the_tokens_the_sublayer_reads(case):
    """Pre-norm: the attention velocity on N₁(x_l) is the split's first sub-step v_{l,0}."""
    family, _, model, mu, result, _ = case
    if family != "llama":
        pytest.skip("a Post-norm sub-step is N(x + f(x)) − x, not f: checked on Pre-norm")
    split = model.split(mu)
    for l, gap in enumerate(result.gaps):
        expected = split[l, 0]
        assert float((gap.velocity - expected).norm() / expected.norm()) <= 1e-12


def test_bad_inputs(case):
    _, _, model, _, _, _ = case
    with pytest.raises(TypeError, match=r"tpde\.pretrained\.Transformer"):
        model_structure(model.layers[0])
    weights_only = model_structure(model)
    assert weights_only.gaps is None
    with pytest.raises(ValueError, match="without tokens"):
        weights_only.table("dynamic_gap")
    with pytest.raises(ValueError, match="without tokens"):
        weights_only.layer_scores("dynamic_gap")
    with pytest.raises(ValueError, match="layer_scores takes"):
        weights_only.layer_scores("drift")


def test_layer_scores(case):
    _, _, model, _, result, _ = case
    for name in ("symmetry", "directionality", "dynamic_gap"):
        values = result.layer_scores(name)
        assert values.shape == (len(model.layers),) and bool(torch.isfinite(values).all())
    assert float(result.layer_scores("dynamic_gap").min()) > FAR


def _read(layer, x):
    norm = layer.attention_norm
    return norm.norm(x) if norm is not None and norm.placement == "pre" else x


def test_depth_energies_on_the_hidden_states(case):
    """𝓔_l before, after the attention step and after layer l on the network's hidden
    states, recomputed from hidden_states, the layer's own norm and its attention part's
    velocity (Normalized(attn, N₁): Attn(N₁x) Pre-norm, Attn(x) Post-norm, no projection);
    the network rate against a central difference (ε = 1e-5: O(ε²) truncation, ≈ 1e-9
    relative; 1e-6 allowed)."""
    _, _, model, mu, _, energies = case
    assert isinstance(energies, DepthEnergies)
    states = model.hidden_states(mu)
    L = len(model.layers)
    for column in (energies.before, energies.after_attention, energies.after,
                   energies.structured_rate, energies.network_rate):  # fmt: skip
        assert column.shape == (L,) and bool(torch.isfinite(column).all())
    for l, layer in enumerate(model.layers):
        near, _ = nearest_gradient_field(layer.attention)

        def energy(x, near=near, layer=layer):
            return float(near.energy(Empirical(_read(layer, x), positions=mu.positions)))

        assert energies.before[l] == pytest.approx(energy(states[l]), rel=1e-12)
        assert energies.after[l] == pytest.approx(energy(states[l + 1]), rel=1e-12)
        x = states[l]  # the attention's step, before a Post-norm's projection
        step = layer.parts[0].velocity(mu.with_points(x), t=float(l))
        assert energies.after_attention[l] == pytest.approx(energy(x + step), rel=1e-12)
        eps = 1e-5
        central = (energy(states[l] + eps * step) - energy(states[l] - eps * step)) / (2 * eps)
        assert float(energies.network_rate[l]) == pytest.approx(central, rel=1e-6)
    assert energies.agrees.dtype == torch.bool
    assert torch.equal(energies.change, energies.after_attention - energies.before)


def test_depth_energies_bad_inputs(case):
    _, _, model, mu, _, _ = case
    with pytest.raises(TypeError, match=r"tpde\.pretrained\.Transformer"):
        depth_energies(model.layers[0], mu)
    with pytest.raises(TypeError, match="Empirical of tokens"):
        depth_energies(model, mu.points)


def test_albert_group_blocks_each_get_a_report(tmp_path):
    """ALBERT, one group of k = 2 Post-LN blocks applied L = 2 times: four attention
    sublayers (layer, block), each read on the tokens before its block."""
    from tests.pretrained.test_load_albert_groups import _oracle

    _oracle(2, 1, 2).save_pretrained(tmp_path)
    model = load(tmp_path, dtype=F64)
    mu = model.embed(torch.arange(3, 3 + N))[0]
    result, energies = model_structure(model, mu), depth_energies(model, mu)
    assert result.places == energies.places == ((0, 0), (0, 1), (1, 0), (1, 1))
    split = model.split(mu)  # (L, 4, n, d): attention, MLP of block 0, then of block 1
    second = mu.points + split[0, :2].sum(0)  # the tokens block 1 of layer 0 reads (Post-LN)
    expected = model.layers[0].blocks[1].attention.velocity(mu.with_points(second))
    assert float((result.gaps[1].velocity - expected).norm() / expected.norm()) <= 1e-12
    assert bool(torch.isfinite(result.table("dynamic_gap")).all())


def test_float32_model_matches_float64(case, tmp_path):
    """A float32 load (the default) runs through the same path; its gaps agree with the
    float64 ones to float32 rounding amplified by the exponential scores (measured 1.5e-6
    and 1.7e-7 relative; 1e-4 allowed); the weight scores are computed in float64 from
    the float32 weights (their rounding, 6e-8: 1e-6 allowed)."""
    _, oracle, _, _, result, _ = case
    oracle.save_pretrained(tmp_path)
    model = load(tmp_path)
    mu = model.embed(torch.arange(3, 3 + N))[0]
    single = model_structure(model, mu)
    assert mu.points.dtype == torch.float32
    assert torch.allclose(single.table("dynamic_gap"), result.table("dynamic_gap"), rtol=1e-4)
    assert torch.allclose(single.table("symmetry"), result.table("symmetry"), rtol=1e-6)


def test_a_subset_of_layers(case):
    _, _, model, mu, result, energies = case
    last = len(model.layers) - 1
    sub = model_structure(model, mu, layers=[last])
    assert sub.places == ((last, 0),)
    assert torch.equal(sub.table("dynamic_gap")[0], result.table("dynamic_gap")[last])
    part = depth_energies(model, mu, layers=[last])
    assert torch.equal(part.before, energies.before[last:])
    with pytest.raises(IndexError, match="out of range"):
        model_structure(model, layers=[len(model.layers)])
    with pytest.raises(TypeError, match="sequence of layer indices"):
        depth_energies(model, mu, layers=1)


def test_depth_energies_past_float64(case, tmp_path):
    """BERT with its query weights ×400: scores of order 10³, 𝓔 beyond float64 (e^{709}).
    The columns are finite and e^{−log_scale} times 𝓔, checked against 𝓔 summed pair by
    pair in 50-digit arithmetic (mpmath) from the structured heads' own W_Q, W_K, c, a
    (log K(i, j) = ½c(⟨W_Qx_i, W_Kx_j⟩ + ⟨W_Qx_j, W_Kx_i⟩) + aᵀx_i + aᵀx_j, MATH.md §12;
    float64 scores of size 10³ carry ≈ 1e-13 absolute error into the exponent: 1e-10
    allowed); the network rate against a central difference of the scaled energy."""
    import copy

    mpmath = pytest.importorskip("mpmath")
    family, oracle, _, _, _, small = case
    if family != "bert":
        pytest.skip("the pair-by-pair oracle transcribes a head without RoPE (BERT)")
    assert float(small.log_scale.abs().max()) == 0.0  # untouched below float64's range
    big = copy.deepcopy(oracle)
    with torch.no_grad():
        for layer in big.encoder.layer:
            layer.attention.self.query.weight.mul_(400.0)
    big.save_pretrained(tmp_path)
    model = load(tmp_path, dtype=F64)
    mu = model.embed(torch.arange(3, 3 + N))[0]
    energies = depth_energies(model, mu)
    assert bool((energies.log_scale > 709.0).any())
    for column in (energies.before, energies.after_attention, energies.after,
                   energies.structured_rate, energies.network_rate):  # fmt: skip
        assert bool(torch.isfinite(column).all())
    assert torch.equal(energies.agrees, torch.sign(energies.change) ==
                       torch.sign(energies.structured_rate))  # fmt: skip
    states = model.hidden_states(mu)
    mpmath.mp.dps = 50
    for l, layer in enumerate(model.layers):
        near, _ = nearest_gradient_field(layer.attention)
        scale = float(energies.log_scale[l])
        x = states[l].numpy()
        total = mpmath.mpf(0)
        for head in near.heads:
            q, k = x @ head.Wq.numpy().T, x @ head.Wk.numpy().T
            ax = x @ head.a.numpy()
            scores = 0.5 * head.scale * (q @ k.T + k @ q.T) + ax[:, None] + ax[None, :]
            pairs = mpmath.fsum(mpmath.exp(mpmath.mpf(float(s)) - scale) for s in scores.flat)
            total += head.sign * pairs / (2 * N * N)
        assert float(energies.before[l]) == pytest.approx(float(total), rel=1e-10)

        def scaled(z, near=near, scale=scale):
            return float(near.energy(Empirical(z, positions=mu.positions), log_scale=scale))

        step = layer.parts[0].velocity(mu.with_points(states[l]), t=float(l))
        eps = 1e-7
        central = (scaled(states[l] + eps * step) - scaled(states[l] - eps * step)) / (2 * eps)
        assert float(energies.network_rate[l]) == pytest.approx(central, rel=1e-5)
