"""Granite (one family file, tpde/pretrained/families/granite.py) against transformers: the
embedding, residual, attention and logit multipliers, each far from 1, with Q/K/V/O biases
(checks: tests/pretrained/family_checks.py)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.pretrained import family_checks as fc
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

_SMALL = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
          "attention_bias": True, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
          "attention_multiplier": 0.7, "logits_scaling": 8.0}  # fmt: skip


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("granite")
    with fc.float64_oracle("granite"):
        model = fc.redrawn("GraniteConfig", _SMALL, "GraniteForCausalLM", 14)
        model.save_pretrained(folder)
        ids, out = fc.outputs(model)
    return folder, ids, out


def test_float64_equals_transformers(case):
    folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == "granite"
    assert model.embedding.scale == 12.0 and model.logit_scale == 1 / 8.0
    assert model.layers[0].attention.scale == 0.7 and model.config.residual_scale == 0.22
    errors = fc.check(model, ids, out, 1e-12)
    print(f"granite float64: max relative {max(errors.values()):.1e}")


def test_float32_within_1e5(case):
    folder, ids, out = case
    errors = fc.check(load(folder), ids, out, 1e-5)
    print(f"granite float32: max relative {max(errors.values()):.1e}")


def test_split_sums_to_every_layer_update(case):
    folder, ids, _ = case
    assert fc.split_error(folder, ids) < 1e-12


def _with(folder, tmp_path, **changes):
    raw = json.loads((folder / "config.json").read_text())
    raw.update(changes)
    for file in folder.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return tmp_path


def test_residual_multiplier_is_the_time_step(case, tmp_path):
    """x_{l+1} − x_l = r·(the update of the same model with r = 1 at the same x_l): the
    multiplier scales every sublayer's velocity, i.e. it is the Euler step's size."""
    folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    unit = load(_with(folder, tmp_path, residual_multiplier=1.0), dtype=torch.float64)
    mu = model.embed(ids)[0]
    split, split_unit = model.split(mu), unit.split(mu)
    assert fc._relative(split[0, 0], 0.22 * split_unit[0, 0]) < 1e-14


@pytest.mark.parametrize("key", ["embedding_multiplier", "residual_multiplier",
                                 "attention_multiplier", "logits_scaling"])  # fmt: skip
def test_a_multiplier_must_be_positive(case, tmp_path, key):
    folder, _, _ = case
    with pytest.raises(LoadError, match=rf"{key} must be .*> 0.*received -1"):
        load(_with(folder, tmp_path, **{key: -1.0}))


def test_mlp_bias_is_refused(case, tmp_path):
    folder, _, _ = case
    with pytest.raises(LoadError, match=r"mlp_bias = True.*granite"):
        load(_with(folder, tmp_path, mlp_bias=True))


def test_streamed_scores_see_the_residual_scale(case):
    """weight_scores builds each block's attention as load does (the residual multiplier
    folded into W_o): its scores equal the loaded model's to rounding (REL: the oracle
    tolerance of tests/pretrained/test_streamed.py); without the fold the mobility-scaled
    scores differ by the factor 0.22."""
    from tests.pretrained.test_streamed import _same
    from tpde.pretrained import model_structure, weight_scores

    folder, _, _ = case
    _same(weight_scores(folder), model_structure(load(folder, dtype=torch.float64)))
