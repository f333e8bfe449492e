"""Task heads against transformers: the pooler (BERT, RoBERTa, ALBERT) and the
sequence-classification heads (``*ForSequenceClassification``).

As tests/pretrained/test_load.py: tiny models with every parameter redrawn, saved with
``save_pretrained`` and loaded by tpde; every hidden state, the pooled first token and the
class logits within 1e-12 relative in float64 and 1e-5 in float32, the predicted class
identical, the per-sublayer split summing to every layer's update to 1e-12.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tests.pretrained import test_load_peri as peri
from tests.pretrained.test_load import _exact_float64, _relative
from tests.pretrained.test_load_parallel import _gptj_float64
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

N, B = 9, 5  # tokens, sentences (class logits on a batch: B rows to compare)
_SMALL = {"vocab_size": 40, "num_hidden_layers": 2, "max_position_embeddings": 34,
          "hidden_size": 16, "intermediate_size": 24, "num_attention_heads": 4}  # fmt: skip
_ALBERT = {**_SMALL, "embedding_size": 8, "num_hidden_layers": 3}
_LLAMA = {**_SMALL, "num_key_value_heads": 2, "pad_token_id": 0, "attention_bias": True}
_NEOX = {**_SMALL, "num_attention_heads": 2, "pad_token_id": 0}
_PERI = {**_SMALL, "num_key_value_heads": 2, "head_dim": 8, "pad_token_id": 0}
_GEMMA = {**_PERI, "sliding_window": 3, "query_pre_attn_scalar": 6, "attention_bias": True}
_GPT = {"vocab_size": 40, "n_layer": 2, "n_positions": 34, "n_embd": 16, "pad_token_id": 0}

#: case → (config class, config, model class, pieces exercised, pooler, classes)
CASES = {
    "bert-pooler": ("BertConfig", _SMALL, "BertModel", "pooler tanh(W x₀ + b)", True, None),
    "roberta-pooler": ("RobertaConfig", _SMALL, "RobertaModel", "pooler", True, None),
    "albert-pooler": ("AlbertConfig", _ALBERT, "AlbertModel", "pooler (one Linear)", True,
                      None),
    "bert-cls": ("BertConfig", {**_SMALL, "num_labels": 3}, "BertForSequenceClassification",
                 "classifier on the pooled token, 3 classes", True, 3),
    "roberta-cls": ("RobertaConfig", {**_SMALL, "num_labels": 5},
                    "RobertaForSequenceClassification",
                    "classification head: own dense + tanh, out_proj; no pooler", False, 5),
    "albert-cls": ("AlbertConfig", {**_ALBERT, "num_labels": 4, "num_hidden_groups": 2,
                                    "inner_group_num": 2}, "AlbertForSequenceClassification",
                   "classifier on the pooler; 2 groups of 2 blocks", True, 4),
    # decoders: score on the last token of the final-normed states (pad_token_id 0: the
    # ids below hold none, so transformers reads the last token too)
    "llama-cls": ("LlamaConfig", {**_LLAMA, "num_labels": 3}, "LlamaForSequenceClassification",
                  "score on the last token, no bias, no LM head", False, 3),
    "qwen3-cls": ("Qwen3Config", {**_LLAMA, "num_labels": 2, "head_dim": 8,
                                  "tie_word_embeddings": True},
                  "Qwen3ForSequenceClassification", "score; tied config, still no LM head",
                  False, 2),
    "gpt2-cls": ("GPT2Config", {**_GPT, "n_head": 4, "num_labels": 3},
                 "GPT2ForSequenceClassification", "score beside transformer.*, after ln_f",
                 False, 3),
    "gpt_neox-cls": ("GPTNeoXConfig", {**_NEOX, "rotary_pct": 0.5, "num_labels": 2},
                     "GPTNeoXForSequenceClassification", "score beside gpt_neox.*, parallel "
                     "block, after final_layer_norm", False, 2),
    "phi-cls": ("PhiConfig", {**_NEOX, "partial_rotary_factor": 0.5, "num_labels": 3},
                "PhiForSequenceClassification", "score; no LM head (nor its bias)", False, 3),
    "gptj-cls": ("GPTJConfig", {**_GPT, "n_head": 2, "rotary_dim": 4, "bos_token_id": 0,
                                "eos_token_id": 0, "num_labels": 2},
                 "GPTJForSequenceClassification", "score beside transformer.*, parallel "
                 "block; no LM head (nor its bias)", False, 2),
    "gemma2-cls": ("Gemma2Config", {**_GEMMA, "attn_logit_softcapping": 2.0,
                                    "final_logit_softcapping": 3.0, "num_labels": 3},
                   "Gemma2ForSequenceClassification", "score NOT soft-capped (the final "
                   "logit cap is the LM head's), after the final (1 + w) RMSNorm", False, 3),
    "gemma3-cls": ("Gemma3TextConfig", {**_GEMMA, "num_hidden_layers": 3,
                                        "sliding_window_pattern": 3, "rope_theta": 50.0,
                                        "rope_local_base_freq": 7.0, "num_labels": 2},
                   "Gemma3TextForSequenceClassification", "score; model_type gemma3_text",
                   False, 2),
    "olmo2-cls": ("Olmo2Config", {**_PERI, "tie_word_embeddings": False, "num_labels": 3},
                  "Olmo2ForSequenceClassification", "score after the output-norm model's "
                  "final RMSNorm", False, 3),
    "olmo3-cls": ("Olmo3Config", {**_PERI, "tie_word_embeddings": False, "num_labels": 2,
                                  "num_hidden_layers": 4, "sliding_window": 3},
                  "Olmo3ForSequenceClassification", "score after the final RMSNorm; 3 local "
                  ": 1 global layers", False, 2),
}  # fmt: skip


def _oracle(case: str):
    config_cls, kwargs, model_cls, _, _, _ = CASES[case]
    torch.manual_seed(sum(map(ord, case)))
    config = getattr(transformers, config_cls)(**kwargs)
    if config_cls in _PERI_CONFIGS:
        config._attn_implementation = "eager"  # Gemma-2's score soft-cap: transformers' own
    model = getattr(transformers, model_cls)(config).to(torch.float64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    # RMSNorm (Gemma: 1 + w), RoPE tables, Gemma's √d and GPT-J's sinusoids in float64
    _FLOAT64.get(config_cls, _exact_float64)(model)
    return model


_PERI_CONFIGS = ("Gemma2Config", "Gemma3TextConfig", "Olmo2Config", "Olmo3Config")
_FLOAT64 = {"GPTJConfig": _gptj_float64, **dict.fromkeys(_PERI_CONFIGS, peri._exact_float64)}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    name = request.param
    model = _oracle(name)
    folder = tmp_path_factory.mktemp(name)
    model.save_pretrained(folder)
    ids = torch.randint(3, 40, (B, N), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), peri._softmax_in_float64():  # eager attention's float32 softmax
        out = model(ids, output_hidden_states=True)
    return name, folder, ids, out


def _check(model, name: str, ids, out, tol: float) -> dict:
    _, _, _, _, pooler, classes = CASES[name]
    last = torch.stack([model.hidden_states(model.embed(row)[0])[-1] for row in ids])
    normed = last if model.final_norm is None else model.final_norm.norm(last)
    errors = {"last": _relative(normed.double(), out.hidden_states[-1])}  # decoders: normed
    if pooler and classes is None:
        errors["pooled"] = _relative(model.pooled(last).double(), out.pooler_output)
    elif not pooler:
        with pytest.raises(ValueError, match="has no pooler"):
            model.pooled(last)
    if classes is None:
        with pytest.raises(ValueError, match="has no sequence-classification head"):
            model.class_logits(last)
    else:
        logits = model.class_logits(last)
        assert logits.shape == (B, classes)
        errors["classes"] = _relative(logits.double(), out.logits)
        assert torch.equal(logits.argmax(-1), out.logits.argmax(-1))
    assert max(errors.values()) < tol, errors
    return errors


def test_float64_equals_transformers(case):
    name, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert (model.classifier is None) == (CASES[name][5] is None)
    assert (model.pooler is None) != CASES[name][4]
    if name.endswith("-cls") and model.final_norm is not None:  # a decoder's score head
        assert model.head is None and model.classifier.bias is None
        with pytest.raises(ValueError, match="has no language-model head"):
            model.logits(torch.zeros(N, 16, dtype=torch.float64))
    if name == "gemma2-cls":  # beyond final_logit_softcapping 3: the cap is not the score's
        assert float(out.logits.abs().max()) > 3.0
    _check(model, name, ids, out, 1e-12)


def test_float32_within_1e5(case):
    name, folder, ids, out = case
    _check(load(folder), name, ids, out, 1e-5)


def test_split_sums_to_every_layer_update(case):
    _, folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    mu = model.embed(ids[0])[0]
    states, split = model.hidden_states(mu), model.split(mu)
    update = states[1:] - states[:-1]
    assert float((split.sum(1) - update).norm() / update.norm()) < 1e-12


def test_heads_promote_float64_tokens_on_a_float32_model(case):
    # As ``logits`` does: float64 hidden states on a float32 model compute in float64
    # (the wider dtype), equal to the float64 model's heads to float32 weight rounding.
    _, folder, ids, _ = case
    narrow, wide = load(folder), load(folder, dtype=torch.float64)
    x = wide.hidden_states(wide.embed(ids[0])[0])[-1]
    held = {"pooled": narrow.pooler, "class_logits": narrow.classifier}
    heads = [head for head, there in held.items() if there is not None]
    if not heads:
        pytest.skip("a model with a pooler or a classifier")
    for head in heads:
        got, want = getattr(narrow, head)(x), getattr(wide, head)(x)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_pooled_tokens_are_checked(case):
    name, folder, _, _ = case
    if not CASES[name][4]:
        pytest.skip("a model with a pooler")
    model = load(folder, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"points must be tokens of shape \(\.\.\., n, 16\)"):
        model.pooled(torch.zeros(3, 8, dtype=torch.float64))


def _edited(tmp_path, case: str, **changes):
    _oracle(case).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(raw))


@pytest.mark.parametrize(
    ("case", "changes", "message"),
    [
        ("bert-cls", {"id2label": {"0": "a", "1": "b"}},
         r"'classifier.weight' has shape \(3, 16\); the config implies \(2, 16\)"),
        ("bert-cls", {"id2label": []}, r"id2label must map each class index to its name \(a "
                                       r"non-empty dict\); received \[\]"),
        ("bert-cls", {"architectures": "BertForSequenceClassification"},
         "architectures must list class names; received 'BertForSequenceClassification'"),
    ],
)  # fmt: skip
def test_a_head_the_config_does_not_describe_is_named(tmp_path, case, changes, message):
    _edited(tmp_path, case, **changes)
    with pytest.raises(LoadError, match=message):
        load(tmp_path)


def test_a_classifier_without_its_pooler_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    _oracle("bert-cls").save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["bert.pooler.dense.weight"], tensors["bert.pooler.dense.bias"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LoadError, match=r"'bert.pooler.dense.weight' is missing \(shape "
                                        r"\(16, 16\) expected\)"):  # fmt: skip
        load(tmp_path)


def test_a_classifier_of_a_family_without_one_is_refused_by_name(tmp_path, monkeypatch):
    """Every family tpde reads has a sequence-classification head; an entry without one
    (here gpt2's with ``classifiers`` emptied: a family added without its head) refuses a
    ``*ForSequenceClassification`` checkpoint by name instead of misreading it."""
    from tpde.pretrained.families import FAMILIES

    monkeypatch.setitem(FAMILIES, "gpt2", dataclasses.replace(FAMILIES["gpt2"], classifiers=()))
    _oracle("gpt2-cls").save_pretrained(tmp_path)
    readers = ", ".join(sorted(name for name, f in FAMILIES.items() if f.classifiers))
    assert {"bert", "llama", "qwen2"} <= set(readers.split(", ")) and "gpt2" not in readers
    with pytest.raises(LoadError, match=r"architectures names GPT2ForSequenceClassification, "
                       r"a sequence-classification head tpde does not read for gpt2 models "
                       rf"\(it reads the heads of {readers}\); load a checkpoint of the "
                       r"base or language model"):  # fmt: skip
        load(tmp_path)


@pytest.mark.parametrize("kind", ["BertForQuestionAnswering", "AlbertForQuestionAnswering"])
def test_question_answering_heads_are_not_read(tmp_path, kind):
    """A QA checkpoint's span head (``qa_outputs``) is not read: its encoder loads."""
    torch.manual_seed(0)
    config = (transformers.BertConfig(**_SMALL) if kind.startswith("Bert") else
              transformers.AlbertConfig(**_SMALL, embedding_size=8))  # fmt: skip
    model = getattr(transformers, kind)(config).to(torch.float64).eval()
    model.save_pretrained(tmp_path)
    loaded = load(tmp_path, dtype=torch.float64)
    assert loaded.classifier is None
    ids = torch.arange(3, 3 + N)
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    last = loaded.hidden_states(loaded.embed(ids)[0])[-1]
    assert _relative(last, out.hidden_states[-1][0]) < 1e-12


def test_token_classification_heads_are_not_read(tmp_path):
    """BertForTokenClassification's classifier (on every token) is not a sequence head: the
    model loads without one (its hidden states unchanged), and says so when asked."""
    torch.manual_seed(0)
    config = transformers.BertConfig(**_SMALL, num_labels=3)
    model = transformers.BertForTokenClassification(config).to(torch.float64).eval()
    model.save_pretrained(tmp_path)
    loaded = load(tmp_path, dtype=torch.float64)
    assert loaded.classifier is None and loaded.pooler is None
    ids = torch.arange(3, 3 + N)
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    last = loaded.hidden_states(loaded.embed(ids)[0])[-1]
    assert _relative(last, out.hidden_states[-1][0]) < 1e-12
    with pytest.raises(ValueError, match="has no sequence-classification head"):
        loaded.class_logits(last)
