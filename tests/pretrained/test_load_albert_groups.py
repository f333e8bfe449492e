"""ALBERT's layer groups (``num_hidden_groups`` G, ``inner_group_num`` k) against transformers.

transformers' AlbertTransformer: layer i applies group int(i / (L / G)), whose k Post-LN
blocks run in order, and records every block's output. tpde builds each group once (one
:class:`~tpde.pretrained.Layer` for k = 1, a :class:`~tpde.pretrained.LayerGroup` of k
blocks otherwise) and repeats that object in the schedule. Tiny models with every parameter
redrawn (as tests/pretrained/test_load.py): every block's output (the layer states and the
sub-steps of the split between them) and the pooler within 1e-12 relative in float64 and
1e-5 in float32; the split sums to every layer's update to 1e-12.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.pretrained.test_load import _relative
from tpde.pretrained import LayerGroup, LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

N, D = 9, 16
#: (L, G, k): layers, groups, blocks a group. (5, 3, ·): uneven groups 0 0 1 1 2;
#: (2, 3, 1): more groups than layers (group 2 stored, never applied).
SHAPES = [(4, 2, 1), (3, 1, 2), (5, 3, 2), (2, 3, 1), (2, 2, 3)]


def _oracle(L: int, G: int, k: int):
    torch.manual_seed(100 * L + 10 * G + k)
    config = transformers.AlbertConfig(
        vocab_size=40, max_position_embeddings=32, hidden_size=D, intermediate_size=24,
        num_attention_heads=4, embedding_size=8, num_hidden_layers=L, num_hidden_groups=G,
        inner_group_num=k,
    )  # fmt: skip
    model = transformers.AlbertModel(config).to(torch.float64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "L{}-G{}-k{}".format(*s))
def case(request, tmp_path_factory):
    L, G, k = request.param
    model = _oracle(L, G, k)
    folder = tmp_path_factory.mktemp("albert")
    model.save_pretrained(folder)
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids[None], output_hidden_states=True)
    return request.param, folder, ids, out


def _block_outputs(model, mu) -> torch.Tensor:
    """x₀ and the output of every block in order, (L·k + 1, n, d): each layer's state plus
    the split's sub-steps within it (after each block's MLP, k = 1, 3, …)."""
    states, split = model.hidden_states(mu), model.split(mu)
    inner = states[:-1, None] + split.cumsum(1)[:, 1::2]  # (L, k, n, d)
    return torch.cat([states[:1], inner.flatten(0, 1)])


def _check(model, ids, out, tol: float) -> dict:
    mu = model.embed(ids)[0]
    mine = _block_outputs(model, mu)
    assert mine.shape[0] == len(out.hidden_states)
    errors = {b: _relative(x.double(), h[0]) for b, (x, h) in
              enumerate(zip(mine, out.hidden_states, strict=True))}  # fmt: skip
    states = model.hidden_states(mu)
    errors["pooled"] = _relative(model.pooled(states[-1]).double(), out.pooler_output[0])
    assert max(errors.values()) < tol, errors
    return errors


def test_float64_equals_transformers(case):
    _, folder, ids, out = case
    _check(load(folder, dtype=torch.float64), ids, out, 1e-12)


def test_float32_within_1e5(case):
    _, folder, ids, out = case
    _check(load(folder), ids, out, 1e-5)


def test_split_sums_to_every_layer_update(case):
    (L, _, k), folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    mu = model.embed(ids)[0]
    states, split = model.hidden_states(mu), model.split(mu)
    assert split.shape == (L, 2 * k, N, D)
    update = states[1:] - states[:-1]
    assert float((split.sum(1) - update).norm() / update.norm()) < 1e-12


def test_a_shared_group_is_one_field_object(case):
    """Layers applying the same group hold the same object; the schedule repeats its field:
    the flow is autonomous on each run of layers that share a group."""
    (L, G, k), folder, _, _ = case
    model = load(folder, dtype=torch.float64)
    group = [int(i / (L / G)) for i in range(L)]  # transformers' expression
    for i in range(L):
        assert model.schedule.piece(i + 0.5) is model.layers[i].field
        for j in range(L):
            assert (model.layers[i] is model.layers[j]) == (group[i] == group[j])
        assert isinstance(model.layers[i], LayerGroup) == (k > 1)
        if k > 1:
            assert len(model.layers[i].blocks) == k and len(model.layers[i].field.parts) == 2 * k
    assert len({id(layer.field) for layer in model.layers}) == len(set(group))


def test_attention_weights_of_a_block(case):
    (_, _, k), folder, ids, _ = case
    model = load(folder, dtype=torch.float64)
    x = model.hidden_states(model.embed(ids)[0])[1]
    for block in range(k):
        weights = model.attention_weights(x, 1, block=block)
        assert weights.shape == (4, N, N)
        torch.testing.assert_close(weights.sum(-1), torch.ones(4, N, dtype=torch.float64))
    with pytest.raises(IndexError, match=rf"block must be an int in 0 … {k - 1} \(the blocks of "
                                         rf"layer 1\); received {k}"):  # fmt: skip
        model.attention_weights(x, 1, block=k)
    with pytest.raises(TypeError, match=r"block must be an int; received '0'"):
        model.attention_weights(x, 1, block="0")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("num_hidden_groups", 3, r"tensor 'encoder.albert_layer_groups.1.albert_layers.0."
                                 r"attention.query.weight' is missing"),
        ("inner_group_num", 2, r"tensor 'encoder.albert_layer_groups.0.albert_layers.1."
                               r"attention.query.weight' is missing"),
        ("num_hidden_groups", 0, "num_hidden_groups must be an integer >= 1; received 0"),
        ("inner_group_num", "2", "inner_group_num must be an integer; received '2'"),
    ],
)  # fmt: skip
def test_groups_the_files_do_not_hold_are_named(tmp_path, key, value, message):
    _oracle(2, 1, 1).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, key: value}))
    with pytest.raises(LoadError, match=message):
        load(tmp_path)
