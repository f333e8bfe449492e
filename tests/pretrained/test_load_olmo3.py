"""OLMo-3 (one family file, tpde/pretrained/families/olmo3.py) against transformers: OLMo-2's
output norms and whole-projection QK-norm, 3 local : 1 global layers with a window that binds
(3 of 9 tokens), YaRN on the global layers only; and the GGUF file llama.cpp's converter writes
for it (architecture olmo2 with its window), read as this family, against the folder of the
values it holds (checks: tests/pretrained/family_checks.py)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from tests.pretrained import family_checks as fc
from tpde.fields import YaRN
from tpde.pretrained import LoadError, load

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

_SMALL = {"vocab_size": 40, "hidden_size": 32, "intermediate_size": 24, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
          "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0, "sliding_window": 3}  # fmt: skip
_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}

#: case → Olmo3Config keywords: "yarn" the default pattern (layers 0-2 local, 3 global),
#: rope_theta 10⁴ (the local layers: Olmo3Config's 5·10⁵, module notes of the family) and
#: YaRN on the global layer; "types" its own layer_types, no scaling.
CASES = {
    "yarn": {**_SMALL, "rope_theta": 1e4, "rope_scaling": _YARN},
    "types": {**_SMALL, "layer_types": ["full_attention", "sliding_attention"] * 2},
}


def _saved(name: str, folder):
    with fc.float64_oracle("olmo3"):
        model = fc.redrawn("Olmo3Config", copy.deepcopy(CASES[name]), "Olmo3ForCausalLM", 13)
        model.save_pretrained(folder)
        ids, out = fc.outputs(model)
    return model, ids, out


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    _, ids, out = _saved(request.param, folder)
    return request.param, folder, ids, out


def test_float64_equals_transformers(case):
    name, folder, ids, out = case
    model = load(folder, dtype=torch.float64)
    assert model.architecture == "olmo3"
    errors = fc.check(model, ids, out, 1e-12)
    print(f"olmo3 {name} float64: max relative {max(errors.values()):.1e}")
    windows = [layer.attention.window for layer in model.layers]
    local = CASES[name].get("layer_types", ["sliding_attention"] * 3 + ["full_attention"])
    assert windows == [3 if kind == "sliding_attention" else None for kind in local]
    scalings = [layer.attention.position.scaling for layer in model.layers]
    assert [isinstance(s, YaRN) for s in scalings] == [
        name == "yarn" and kind == "full_attention" for kind in local
    ]
    for layer in model.layers:  # the window matters: without it the model is another one
        layer.attention.window = None
    assert fc.logits_error(model, ids, out) > 1e-4


def test_local_layers_are_unscaled_at_their_own_base(case):
    """The yarn case: rope_theta 10⁴ on the global layer (with YaRN), Olmo3Config's 5·10⁵ on
    the local ones (transformers 5 pops rope_theta for the global layers alone); giving the
    local layers the global RoPE changes the logits."""
    name, folder, ids, out = case
    if name != "yarn":
        pytest.skip("the yarn case holds the two RoPEs")
    model = load(folder, dtype=torch.float64)
    assert model.config.layer_rope_base(0) == 5e5 and model.config.layer_rope_base(3) == 1e4
    for layer in model.layers[:3]:
        layer.attention.position = model.layers[3].attention.position
    assert fc.logits_error(model, ids, out) > 1e-4


def test_float32_within_1e5(case):
    name, folder, ids, out = case
    errors = fc.check(load(folder), ids, out, 1e-5)
    print(f"olmo3 {name} float32: max relative {max(errors.values()):.1e}")


def test_split_sums_to_every_layer_update(case):
    _, folder, ids, _ = case
    assert fc.split_error(folder, ids) < 1e-12


def test_a_checkpoint_config_of_transformers_4(case, tmp_path):
    """OLMo-3's released config.json: top-level rope_theta and rope_scaling (transformers
    4's), read as transformers 5 reads it — the scaling and rope_theta on the global layers."""
    name, folder, ids, out = case
    raw = json.loads((folder / "config.json").read_text())
    params = raw.pop("rope_parameters")
    raw["rope_theta"] = params["full_attention"]["rope_theta"]
    if name == "yarn":
        raw["rope_scaling"] = {
            k: v for k, v in params["full_attention"].items() if k != "rope_theta"
        }
    for file in folder.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    fc.check(load(tmp_path, dtype=torch.float64), ids, out, 1e-12)


def test_rope_type_on_the_whole_model_is_refused(case, tmp_path):
    _, folder, _, _ = case
    raw = json.loads((folder / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    for file in folder.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(LoadError, match=r"rope_parameters\.rope_type is set on the whole"):
        load(tmp_path)


# ---------------------------------------------------------------------- GGUF (llama.cpp: olmo2)
gguf_convert = pytest.importorskip("tests.pretrained.gguf_convert")


def _pair(tmp_path, name: str = "yarn", **options):
    """(folder, file): the tiny model of ``name`` as llama.cpp's converter writes it (olmo2
    with its window), and the folder of the float32 values the file holds, its local layers'
    RoPE base the global one (llama.cpp's one ``rope.freq_base``)."""
    model = fc.redrawn("Olmo3Config", copy.deepcopy(CASES[name]), "Olmo3ForCausalLM", 13)
    held = gguf_convert.convert(model, tmp_path / "m.gguf", **options)
    folder_model = copy.deepcopy(model).to(torch.float32)
    folder_model.load_state_dict(held)
    folder_model.config.rms_norm_eps = float(np.float32(folder_model.config.rms_norm_eps))
    folder_model.save_pretrained(tmp_path / "folder")
    raw = json.loads((tmp_path / "folder" / "config.json").read_text())
    params = raw["rope_parameters"]  # llama.cpp's reading: the one base on every layer
    params["sliding_attention"]["rope_theta"] = params["full_attention"]["rope_theta"]
    (tmp_path / "folder" / "config.json").write_text(json.dumps(raw))
    return tmp_path / "folder", tmp_path / "m.gguf"


_PATTERN = "olmo2.attention.sliding_window_pattern"


@pytest.mark.parametrize(
    "pattern",
    [None, ("add_uint32", 4), ("add_array", [True, True, True, False])],
    ids=["absent", "period", "per-layer"],
)
def test_gguf_olmo2_with_a_window_is_olmo3_bit_for_bit(tmp_path, pattern):
    """llama.cpp reads an olmo2 file with a window > 0 as OLMo-3: its pattern (absent: 4), the
    local layers' RoPE unscaled at the file's base, YaRN on the global ones. The file's model
    equals the folder's of the same values (its local layers at the global base), bit for bit
    in float64 (the same sums), and transformers' model of that folder (1e-12; transformers'
    GGUF loader reads no olmo2 file: test_transformers_gguf_loader_does_not_read_olmo2)."""
    options = {} if pattern is None else {"metadata": {_PATTERN: pattern}}
    folder, file = _pair(tmp_path, **options)
    from_file, from_folder = (load(p, dtype=torch.float64) for p in (file, folder))
    assert from_file.architecture == "olmo3"
    assert [layer.attention.window for layer in from_file.layers] == [3, 3, 3, None]
    assert from_file.config.layer_rope_base(0) == 1e4  # llama.cpp: the one base
    ids = torch.arange(3, 3 + fc.N)
    states = from_file.hidden_states(from_file.embed(ids)[0])
    states_folder = from_folder.hidden_states(from_folder.embed(ids)[0])
    assert torch.equal(states, states_folder)
    assert torch.equal(from_file.logits(states[-1]), from_folder.logits(states_folder[-1]))
    if pattern is None:  # and that folder is transformers' model of the file (1e-12)
        with fc.float64_oracle("olmo3"):
            hf = transformers.Olmo3ForCausalLM.from_pretrained(
                folder, dtype=torch.float64, attn_implementation="eager"
            ).eval()
            fc._float64_norms(hf)
            with torch.no_grad():
                out = hf(ids[None], output_hidden_states=True)
        errors = fc.check(from_file, ids, out, 1e-12)
        print(f"olmo3 GGUF (olmo2) vs transformers float64: {max(errors.values()):.1e}")


def test_gguf_olmo2_without_a_window_stays_olmo2(tmp_path):
    """No window (0, llama.cpp's "none": test_gguf_bad_input): OLMo-2, one RoPE for all."""
    _, file = _pair(tmp_path, unset=("olmo2.attention.sliding_window",))
    model = load(file)
    assert model.architecture == "olmo2" and model.config.window is None


def test_gguf_olmo2_without_a_base_reads_llama_cpps_default(tmp_path):
    """An olmo2 file with a window and no ``rope.freq_base``: llama.cpp's default 10⁴ on every
    layer (its load_hparams reads the key as optional), not Olmo3Config's 5·10⁵."""
    _, file = _pair(tmp_path, unset=("olmo2.rope.freq_base",))
    model = load(file)
    assert model.architecture == "olmo3"
    assert {model.config.layer_rope_base(l) for l in range(4)} == {1e4}


def test_transformers_gguf_loader_does_not_read_olmo2():
    """The second oracle is absent: transformers' GGUF loader reads no olmo2 file (measured
    here, so the skip's reason is checked, not assumed); the folder is the oracle."""
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    assert "olmo2" not in hf_gguf.GGUF_SUPPORTED_ARCHITECTURES


def test_gguf_pattern_of_another_period_and_a_bad_one(tmp_path):
    """A period 2 (llama.cpp: l mod 2 < 1 local) gives 1 local : 1 global; a pattern neither
    a period nor flags is refused by its key."""
    _, file = _pair(tmp_path, metadata={_PATTERN: ("add_uint32", 2)})
    assert [layer.attention.window for layer in load(file).layers] == [3, None, 3, None]
    (tmp_path / "s").mkdir()
    _, file = _pair(tmp_path / "s", metadata={_PATTERN: ("add_string", "LLLG")})
    with pytest.raises(LoadError, match=r"sliding_window_pattern' = 'LLLG' is neither a period"):
        load(file)


def test_sliding_window_pattern_other_than_4_is_refused(case, tmp_path):
    """Olmo3Config ignores sliding_window_pattern (its layer_types: every 4th layer global),
    which Gemma's reading would apply: refused unless 4, naming the key."""
    _, folder, _, _ = case
    raw = json.loads((folder / "config.json").read_text())
    raw.pop("layer_types")
    raw["sliding_window_pattern"] = 2
    for file in folder.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(LoadError, match=r"sliding_window_pattern = 2, which changes"):
        load(tmp_path)
