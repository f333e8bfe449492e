"""GGUF files of every family llama.cpp writes and tpde reads, as llama.cpp's converter
writes them, each equal to the Hugging Face folder of the same weights — in F32, F16 and the
quantised Q8_0 and Q4_0 — and to transformers' own GGUF loader where it reads the
architecture.

The cases are collected, not listed: each registered family with a GGUF map declares its
base case in its own folder test (``GGUF_CASES``, :mod:`tests.pretrained.gguf_cases`), a
family without one fails :func:`test_every_gguf_family_declares_its_case`, and the variants
below (a tied head, LongRoPE, Falcon's layouts, …) vary those. Each case names llama.cpp's
architecture itself (its converter class's ``model_arch``), which the oracle writes: tpde's
``GGUFMap.architecture`` is held equal to it, and to gguf-py's names
(:func:`test_each_case_names_llama_cpp_s_architecture`), never its source.

Each case: a tiny transformers model with EVERY parameter redrawn (Gemma's norm weights
on a 2⁻¹⁰ grid, so that the converter's stored 1 + w is exact in float32), written by the
test oracle :mod:`tests.pretrained.gguf_convert` (llama.cpp's ``convert_hf_to_gguf.py``
conventions per architecture). The folder beside it holds the values the file holds: each
matrix quantised and dequantised by gguf-py in the file's layout and put back in the
checkpoint's, the norm epsilon rounded to float32 as the file stores it. Both are loaded in
float64; a hidden state or the logits of the file then differ from the folder's only by
rounding: ≤ 1e-12 relative (measured: 0, bit-identical, for every family and type), greedy
tokens identical. Widths are multiples of 32 so that every matrix fills the quantised
types' 32-wide blocks.
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile

import numpy as np
import pytest
import torch

from tests.pretrained.gguf_cases import SMALL, base_cases, missing_cases, unread_problem
from tests.pretrained.gguf_convert import (
    REGISTERED_WITH,
    architecture,
    convert,
    phi3_attention_factor,
)
from tests.pretrained.test_load import _relative
from tpde.pretrained import LoadError, load
from tpde.pretrained.families.base import FAMILIES

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

N = 9


def _longrope(pairs: int) -> dict:
    """LongRoPE on half of each head: factors in [1, 4) (C₀ = 4: the 9 tokens take the long)."""
    g = torch.Generator().manual_seed(5)
    short, long = (1 + 3 * torch.rand(2, pairs, generator=g, dtype=torch.float64)).tolist()
    return {"rope_type": "longrope", "short_factor": short, "long_factor": long,
            "rope_theta": 1e4, "partial_rotary_factor": 0.5}  # fmt: skip


#: family → its base case (config class, config, model class, architecture), declared by the
#: family's own folder test (``GGUF_CASES`` of tests/pretrained/test_load*.py;
#: tests/pretrained/gguf_cases.py), and the modules whose cases could not be read.
COLLECTED = base_cases()
BASE = COLLECTED.cases

#: The further cases of a family: case → (family, its config as a function of the base
#: case's), with the base case's config and model classes.
VARIANTS = {
    "llama-tied": ("llama", lambda base: {**SMALL, "tie_word_embeddings": True}),
    "gpt_neox-sequential": ("gpt_neox", lambda base: {**base, "rotary_pct": 0.25,
                                                      "use_parallel_residual": False}),
    "phi3-longrope": ("phi3", lambda base: {**base, "original_max_position_embeddings": 4,
                                            "rope_parameters": _longrope(2)}),
    "stablelm-qk-parallel": ("stablelm", lambda base: {**SMALL, "qk_layernorm": True,
                                                       "use_parallel_residual": True,
                                                       "partial_rotary_factor": 0.5}),
    "falcon-grouped": ("falcon", lambda base: {**base, "new_decoder_architecture": True,
                                               "num_kv_heads": 2}),
    "falcon-grouped-one-norm": ("falcon", lambda base: {**base, "new_decoder_architecture": True,
                                                        "num_kv_heads": 2,
                                                        "num_ln_in_parallel_attn": 1}),
    "falcon-per-head": ("falcon", lambda base: {**base, "multi_query": False}),
}  # fmt: skip


def _cases() -> dict:
    """case → (config class, config, model class): each registered GGUF family's base case
    (named as the family), then its variants, in registry order."""
    out = {}
    for entry in FAMILIES.values():
        if entry.family not in BASE:
            continue  # test_every_gguf_family_declares_its_case names it
        config_cls, kwargs, model_cls, _ = BASE[entry.family]
        out[entry.family] = (config_cls, kwargs, model_cls)
        for case, (family, rule) in VARIANTS.items():
            if family == entry.family:
                out[case] = (config_cls, rule(kwargs), model_cls)
    return out


#: case → (config class, config, model class)
CASES = _cases()
QTYPES = ("F32", "F16", "Q8_0", "Q4_0")
_EPS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")


def tiny(case: str):
    """The transformers model of ``case``, float32, every parameter redrawn."""
    config_cls, kwargs, model_cls = CASES[case]
    torch.manual_seed(sum(map(ord, case)))
    config = getattr(transformers, config_cls)(**kwargs)
    config._attn_implementation = "eager"
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(0.0, 0.5)
            if "gemma" in case and name.endswith("norm.weight"):
                parameter.copy_(torch.round(parameter * 1024) / 1024)
    return model


def write_pair(case: str, base, qtype: str = "F32", **options):
    """(folder, file) of the same weights: the file as llama.cpp's converter writes the
    tiny model of ``case`` in ``qtype``, the folder the values it holds."""
    model = tiny(case)
    held = convert(model, base / f"{qtype}.gguf", qtype, **options)
    folder_model = copy.deepcopy(model)
    missing, unexpected = folder_model.load_state_dict(held, strict=False)
    assert not unexpected and all(n.endswith("lm_head.weight") for n in missing), missing
    if qtype != "F32":  # the embedding (40 × 32) is stored rounded
        embed = next(n for n in held if n.endswith(("embed_tokens.weight", "wte.weight",
                                                    "embed_in.weight",
                                                    "word_embeddings.weight")))  # fmt: skip
        assert not torch.equal(held[embed], model.state_dict()[embed])
    for key in _EPS:  # the file holds float32 numbers: the folder the same
        if hasattr(folder_model.config, key):
            value = np.float32(getattr(folder_model.config, key))
            setattr(folder_model.config, key, float(value))
    params = getattr(folder_model.config, "rope_parameters", None) or {}
    if params.get("rope_type") == "longrope":  # the file holds float32 factors and α
        for key in ("short_factor", "long_factor"):
            params[key] = np.float32(params[key]).tolist()
        alpha = phi3_attention_factor(folder_model.config.to_dict())
        params["attention_factor"] = float(np.float32(alpha))
    folder_model.save_pretrained(base / qtype)
    return base / qtype, base / f"{qtype}.gguf"


def outputs(model, ids):
    states = model.hidden_states(model.embed(ids)[0])
    return states, model.logits(states[-1])


def errors(file_model, folder_model, ids) -> dict:
    states, logits = outputs(file_model, ids)
    expected_states, expected_logits = outputs(folder_model, ids)
    out = {l: _relative(states[l], expected_states[l]) for l in range(len(states))}
    out["logits"] = _relative(logits, expected_logits)
    assert torch.equal(logits.argmax(-1), expected_logits.argmax(-1))
    return out


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_file_equals_the_folder_of_its_values(case, qtype, tmp_path):
    folder, file = write_pair(case, tmp_path, qtype)
    folder_model = load(folder, dtype=torch.float64)
    file_model = load(file, dtype=torch.float64)
    assert file_model.architecture == folder_model.architecture
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    measured = errors(file_model, folder_model, ids)
    assert max(measured.values()) < 1e-12, measured


#: The cases compared with transformers' GGUF loader: every case but "llama" (transformers
#: reads no attention bias of a llama file; "llama-tied" has none). The loader reads a
#: GPT-2's context_length as n_ctx (so that n_positions keeps its default 1024, the tiny
#: GPT-2's), a Qwen3's head dimension not at all (its default 128, the tiny model's), nor a
#: Gemma-2's soft-caps and query_pre_attn_scalar (its defaults 50, 30 and 256 are the tiny
#: model's), nor a Phi-3's rope.dimension_count or LongRoPE factors (so "phi3" rotates whole
#: heads and "phi3-longrope" is the folder's alone), nor a StableLM's rope.dimension_count or
#: QK-norms (its default rotates a quarter of each head, the tiny "stablelm"'s;
#: "stablelm-qk-parallel" is the folder's alone), nor a Falcon's layout (it builds every falcon
#: file as multi-query Falcon-7B, the tiny "falcon": the other layouts are the folder's alone).
#: Architectures it does not read (its GGUF_SUPPORTED_ARCHITECTURES; with transformers 5 gemma,
#: olmo2, phi2, gptneox) are skipped, naming the reason: their folder is their one oracle; a
#: case whose model_type it reads but whose architecture it does not, or reads as another
#: model, fails (:func:`_transformers_reads`).
HF_CASES = [case for case in CASES if case not in (
    "llama", "phi3-longrope", "stablelm-qk-parallel", "falcon-grouped", "falcon-grouped-one-norm",
    "falcon-per-head")]  # fmt: skip
#: (file type, dtype of both models, relative tolerance): float64 to rounding (measured
#: ≤ 8.5e-16); float32, both sides' own float32 arithmetic (RMSNorm, RoPE tables, softmax
#: ordered differently), a few float32 ulps through two layers (measured ≤ 4.5e-7): 1e-5.
HF_TYPES = [("F32", torch.float64, 1e-12), ("Q8_0", torch.float64, 1e-12),
            ("Q8_0", torch.float32, 1e-5)]  # fmt: skip


def _transformers_reads(case: str) -> None:
    """Skip unless transformers' GGUF loader reads the architecture of ``case`` (the one the
    oracle writes); fail where it reads it as another model, or reads the case's model_type
    but not its architecture (:func:`_reads_architecture`)."""
    model_type = getattr(transformers, CASES[case][0]).model_type
    _reads_architecture(model_type, architecture(model_type))


def _header_config(arch: str) -> dict:
    """transformers' ``load_gguf_checkpoint`` config of a GGUF file of ``arch`` with no keys
    or tensors (the ``model_type`` it builds is decided by ``general.architecture`` alone)."""
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/{arch}.gguf"
        writer = gguf.GGUFWriter(path, arch)
        writer.write_header_to_file(), writer.write_kv_data_to_file()
        writer.write_tensors_to_file(), writer.close()
        return hf_gguf.load_gguf_checkpoint(path, return_tensors=False)["config"]


def _reads_architecture(model_type: str, arch: str) -> None:
    """Skip unless transformers' GGUF loader reads files of ``arch``; fail where it reads
    ``model_type``'s GGUF files (its GGUF_SUPPORTED_ARCHITECTURES) but not ``arch``'s, or
    reads ``arch``'s as another model: the architecture the case names is then not the one
    llama.cpp writes for ``model_type``. Asked of transformers itself (:func:`_header_config`)."""
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    supported = getattr(hf_gguf, "GGUF_SUPPORTED_ARCHITECTURES", ())
    try:
        read = _header_config(arch)
    except ValueError as err:
        if "not supported" not in str(err):
            raise
        if model_type in supported:
            pytest.fail(
                f"transformers {transformers.__version__} reads GGUF files of {model_type!r} "
                f"models (its GGUF_SUPPORTED_ARCHITECTURES) but not the case's architecture "
                f"{arch!r}: the case does not name llama.cpp's architecture of {model_type!r}."
            )
        pytest.skip(
            f"transformers {transformers.__version__}'s GGUF loader does not read "
            f"{arch!r} files (its GGUF_SUPPORTED_ARCHITECTURES); the folder is the oracle"
        )
    if read.get("model_type") != model_type:
        pytest.fail(
            f"transformers reads a GGUF file of architecture {arch!r} as a "
            f"{read.get('model_type')!r} model, the case's is {model_type!r}: the case does not "
            "name llama.cpp's architecture of it."
        )


def transformers_model(directory, file, dtype, case: str, **options):
    """transformers' model of the GGUF ``file`` in ``directory`` (``from_pretrained(…,
    gguf_file=…)``; ``options`` to it, e.g. a ``config``), in ``dtype``; in float64 its
    RMSNorm, RoPE and embedding scale evaluated in float64 as in test_load_peri."""
    from tests.pretrained.test_load import _exact_float64 as plain_float64
    from tests.pretrained.test_load_peri import _exact_float64 as peri_float64

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=file.name, dtype=dtype, attn_implementation="eager", **options
    ).eval()
    if dtype == torch.float64:
        (peri_float64 if "gemma" in case else plain_float64)(hf)
    return hf


def transformers_errors(model, hf, ids) -> dict:
    """Layer (and "logits") → the relative difference of tpde's ``model`` from transformers'
    ``hf`` on token ids ``ids`` (transformers' softmax in float64 where its dtype is)."""
    from tests.pretrained.test_load_peri import _softmax_in_float64

    with torch.no_grad(), _softmax_in_float64():
        out = hf(ids[None], output_hidden_states=True)
    states, logits = outputs(model, ids)
    states = [*states[:-1], model.final_norm.norm(states[-1])]  # transformers' last is normed
    measured = {l: _relative(s, out.hidden_states[l][0]) for l, s in enumerate(states)}
    measured["logits"] = _relative(logits, out.logits[0])
    measured["argmax"] = torch.equal(logits.argmax(-1), out.logits[0].argmax(-1))
    return measured


@pytest.mark.parametrize(
    "qtype, dtype, tolerance", HF_TYPES, ids=[f"{q}-{str(d)[6:]}" for q, d, _ in HF_TYPES]
)
@pytest.mark.parametrize("case", HF_CASES)
def test_file_equals_transformers_gguf_loader(case, qtype, dtype, tolerance, tmp_path):
    """tpde's model of the file against transformers' model of the same file
    (``from_pretrained(…, gguf_file=…)``), both in ``dtype`` (in float64 transformers'
    RMSNorm, RoPE, embedding scale and softmax evaluated in float64 as in test_load_peri):
    every hidden state and the logits within ``tolerance`` relative (:data:`HF_TYPES`),
    greedy tokens identical."""
    _transformers_reads(case)
    _, file = write_pair(case, tmp_path, qtype, vocabulary=True)
    hf = transformers_model(tmp_path, file, dtype, case)
    if "falcon" in case:  # its loader maps no layer_norm_epsilon of a falcon file (its
        for module in hf.modules():  # default 1e-5): the file's float32 value, as tpde reads
            if isinstance(module, torch.nn.LayerNorm):  # it (else 5.9e-13 apart)
                module.eps = float(np.float32(hf.config.layer_norm_epsilon))
    ids = torch.randint(3, 40, (N,), generator=torch.Generator().manual_seed(1))
    measured = transformers_errors(load(file, dtype=dtype), hf, ids)
    assert measured.pop("argmax")
    assert max(measured.values()) < tolerance, measured


def test_every_gguf_family_declares_its_case():
    """Every registered family with a GGUF map has its base case (``GGUF_CASES`` of its folder
    test), or this fails naming it — and naming a folder test that skipped at import or failed
    to import, whose cases are then missing: a new family cannot go untested here. Every case
    is of a family with a GGUF map, and every variant varies a declared base case."""
    problem = unread_problem(COLLECTED)
    assert problem is None, problem
    missing = missing_cases(BASE)
    assert not missing, (
        f"the GGUF families {missing} declare no GGUF case: give GGUF_CASES = {{family: (config "
        "class, config, model class, llama.cpp's architecture)} in the family's folder test, "
        "tests/pretrained/test_load_<family>.py (tests/pretrained/gguf_cases.py)"
    )
    gguf_families = {entry.family for entry in FAMILIES.values() if entry.gguf is not None}
    assert set(BASE) <= gguf_families, sorted(set(BASE) - gguf_families)
    assert {family for family, _ in VARIANTS.values()} <= set(BASE)


def _map_disagreements(cases: dict, families: dict) -> list[str]:
    """The cases whose family's GGUF map says another architecture or ``model_type`` than the
    case (its own architecture, its config class's ``model_type``), each named with both."""
    out = []
    for family, (config_cls, _, _, arch) in cases.items():
        spec = families[family].gguf
        model_type = getattr(transformers, config_cls).model_type
        if (spec.architecture, spec.model_type) != (arch, model_type):
            out.append(
                f"{family}: the case writes {arch!r} files of model_type {model_type!r}, the "
                f"GGUF map reads {spec.architecture!r} as {spec.model_type!r}"
            )
    return out


def test_each_case_names_llama_cpp_s_architecture():
    """The architecture each case names (the oracle writes it) is one of gguf-py's
    (``MODEL_ARCH_NAMES``, llama.cpp's spelling), and the family's GGUF map reads that
    architecture as the case's ``model_type``: a map that names another (qwen2's as
    "granite") fails here, whatever its own files say. The converter's
    :data:`~tests.pretrained.gguf_convert.REGISTERED_WITH` (Mistral written as llama,
    OLMo-3 as olmo2) is the architecture of each map whose ``windowed`` values read a file as
    that ``model_type``."""
    names = set(gguf.MODEL_ARCH_NAMES.values())
    unknown = {f: case[3] for f, case in BASE.items() if case[3] not in names}
    assert not unknown, f"not gguf-py architecture names (MODEL_ARCH_NAMES): {unknown}"
    assert not _map_disagreements(BASE, FAMILIES), _map_disagreements(BASE, FAMILIES)
    read_as = {
        entry.gguf.windowed["model_type"]: entry.gguf.architecture
        for entry in FAMILIES.values()
        if entry.gguf is not None and "model_type" in entry.gguf.windowed
    }
    assert read_as == REGISTERED_WITH
    assert set(REGISTERED_WITH.values()) <= {case[3] for case in BASE.values()}


def test_a_wrong_architecture_in_a_gguf_map_is_caught(monkeypatch, tmp_path):
    """The review's probe: qwen2's map renamed "granite" in memory (and starcoder2's
    "stablelm"). The case-to-map check names each; the file the oracle writes (of the case's
    architecture, "qwen2") is refused by tpde, which knows no qwen2 files any more; and a case
    that copied the wrong name is caught by transformers' loader, which reads qwen2's files but
    not granite's and reads stablelm files as StableLM models."""
    for family, wrong in (("qwen2", "granite"), ("starcoder2", "stablelm")):
        entry = FAMILIES[family]
        renamed = dataclasses.replace(entry.gguf, architecture=wrong)
        monkeypatch.setitem(FAMILIES, family, dataclasses.replace(entry, gguf=renamed))
    named = _map_disagreements(BASE, FAMILIES)
    assert [line.split(":")[0] for line in named] == ["qwen2", "starcoder2"]
    assert "the GGUF map reads 'granite' as 'qwen2'" in named[0]
    _, file = write_pair("qwen2", tmp_path, "F32")
    with pytest.raises(LoadError, match=r"architecture 'qwen2' \(general\.architecture\)"):
        load(file)
    with pytest.raises(pytest.fail.Exception, match=r"reads GGUF files of 'qwen2' .* 'granite'"):
        _reads_architecture("qwen2", "granite")
    with pytest.raises(pytest.fail.Exception, match=r"'stablelm' as a 'stablelm' model, the "):
        _reads_architecture("starcoder2", "stablelm")
    with pytest.raises(pytest.skip.Exception, match=r"does not read 'phi2' files"):
        _reads_architecture("phi", "phi2")


def test_a_gguf_family_without_a_case_is_named():
    """The check above names a family registered with a GGUF map and no case (llama's entry
    under a new name and architecture), and no family without a map."""
    llama = FAMILIES["llama"]
    clone = dataclasses.replace(
        llama, family="llama9", model_types=("llama9",),
        gguf=dataclasses.replace(llama.gguf, architecture="llama9"),
    )  # fmt: skip
    plain = dataclasses.replace(clone, family="llama10", model_types=("llama10",), gguf=None)
    assert missing_cases(BASE, [*FAMILIES.values(), clone, plain]) == ["llama9"]
