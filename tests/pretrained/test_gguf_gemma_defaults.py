"""Gemma GGUF files without a key llama.cpp reads as optional: read with llama.cpp's default
(the GGUF map's ``defaults``), whatever the family's config class says.

llama.cpp's ``llama_model::load_hparams`` (``src/llama-model.cpp``): LLM_ARCH_GEMMA2 sets
n_swa = 4096 and reads ``attention.sliding_window``, ``attn_logit_softcapping`` and
``final_logit_softcapping`` with ``ml.get_key(…, false)`` (optional; the soft-caps default to
``llama_hparams``' 50 and 30, ``src/llama-hparams.h``); every architecture's
``rope.freq_base`` is optional with the default 10⁴ — Gemma-3's config class says 10⁶; Gemma
(v1)'s converter writes none. Each
case: the file without the key equals the file carrying llama.cpp's default (the same model:
≤ 1e-14 relative on the logits, float64; measured 0) and differs from one carrying another
value (the key changes the computation here, the test is not vacuous: measured 0.20, 0.12,
0.96 for Gemma-2's window 3, soft-caps 5 and 3; 0.018 for Gemma-3's base 10⁶, 0.39 for
Gemma's).
"""

from __future__ import annotations

import pytest
import torch

from tests.pretrained.test_gguf_converted import CASES as MODELS
from tests.pretrained.test_gguf_converted import outputs, tiny
from tests.pretrained.test_load import _relative
from tpde.pretrained import load
from tpde.pretrained.families.base import FAMILIES

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

from tests.pretrained.gguf_convert import convert  # noqa: E402

#: metadata key (without the prefix) → (GGUFWriter method, another value than the default,
#: the config record's attribute it sets)
_KEYS = {
    "attention.sliding_window": ("add_uint32", 3, "window"),
    "attn_logit_softcapping": ("add_float32", 5.0, "attn_softcap"),
    "final_logit_softcapping": ("add_float32", 3.0, "logit_softcap"),
    "rope.freq_base": ("add_float32", 1e6, "rope_base"),
}
CASES = [(arch, key, value) for arch in ("gemma", "gemma2", "gemma3")
         for key, value in FAMILIES[arch].gguf.defaults.items()]  # fmt: skip


@pytest.fixture(autouse=True)
def _six_layers(monkeypatch):
    """Gemma-3 of 6 layers: its last global (5 local : 1 global), so that the global RoPE base
    plays a part (the 3 layers of test_gguf_converted's are all local)."""
    config_cls, kwargs, model_cls = MODELS["gemma3"]
    monkeypatch.setitem(MODELS, "gemma3", (config_cls, {**kwargs, "num_hidden_layers": 6},
                                           model_cls))  # fmt: skip


def _file(tmp_path, case: str, name: str, **options):
    path = tmp_path / f"{name}.gguf"
    convert(tiny(case), path, "F32", **options)
    return load(path, dtype=torch.float64)


def test_the_defaults_are_llama_cpps():
    """The maps' defaults, as llama.cpp's load_hparams and llama_hparams give them (module
    notes); each a key the map reads."""
    assert FAMILIES["gemma2"].gguf.defaults == {"attention.sliding_window": 4096,
                                                "attn_logit_softcapping": 50.0,
                                                "final_logit_softcapping": 30.0}  # fmt: skip
    assert FAMILIES["gemma3"].gguf.defaults == {"rope.freq_base": 10_000.0}
    assert FAMILIES["gemma"].gguf.defaults == {"rope.freq_base": 10_000.0}
    assert set(_KEYS) >= {key for _, key, _ in CASES}


@pytest.mark.parametrize("arch, key, default", CASES, ids=[f"{a}-{k}" for a, k, _ in CASES])
def test_a_file_without_an_optional_key_is_read_with_llama_cpps_default(
    arch, key, default, tmp_path
):
    method, other, attribute = _KEYS[key]
    full = f"{arch}.{key}"
    unset = () if arch == "gemma" else (full,)  # GemmaModel writes no RoPE base
    missing = _file(tmp_path, arch, "missing", unset=unset)
    carrying = _file(tmp_path, arch, "default", metadata={full: (method, default)})
    different = _file(tmp_path, arch, "other", metadata={full: (method, other)})
    assert getattr(missing.config, attribute) == getattr(carrying.config, attribute) == default
    assert getattr(different.config, attribute) == other
    ids = torch.arange(3, 12)  # 9 tokens: a window of 3 binds, one of 4096 does not
    logits = outputs(missing, ids)[1]
    assert _relative(logits, outputs(carrying, ids)[1]) < 1e-14
    assert _relative(logits, outputs(different, ids)[1]) > 1e-6


def test_a_gemma3_score_soft_cap_is_accepted_and_unused(tmp_path):
    """Gemma-3's ``attn_logit_softcapping``: llama.cpp does not read it for gemma3 files and
    transformers' Gemma-3 does not apply it (the family lists it irrelevant), so a file carrying
    one is the model without it (≤ 1e-14 relative on the logits, float64; measured 0)."""
    assert FAMILIES["gemma3"].gguf.ignored == ("attn_logit_softcapping",)
    plain = _file(tmp_path, "gemma3", "plain")
    capped = _file(tmp_path, "gemma3", "capped",
                   metadata={"gemma3.attn_logit_softcapping": ("add_float32", 0.5)})  # fmt: skip
    ids = torch.arange(3, 12)
    assert _relative(outputs(plain, ids)[1], outputs(capped, ids)[1]) < 1e-14
