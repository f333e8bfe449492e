"""tests/pretrained/gguf_cases.py: the collection of the families' GGUF cases from their folder
tests, run on stand-in packages of folder tests written to a temporary folder (as
tests/test_package_boundaries.py plants modules): a module that skips at import (a
module-level ``pytest.importorskip``) or fails to import is named and left out, the others
still collected; a malformed or twice-declared case is refused by name.
"""

from __future__ import annotations

import itertools

import pytest

from tests.pretrained.gguf_cases import Collected, base_cases, missing_cases, unread_problem
from tpde.pretrained.families import FAMILIES

_COUNT = itertools.count()
_LLAMA = "GGUF_CASES = {'llama': ('LlamaConfig', {}, 'LlamaForCausalLM', 'llama')}\n"
_QWEN3 = "GGUF_CASES = {'qwen3': ('Qwen3Config', {}, 'Qwen3ForCausalLM', 'qwen3')}\n"
_SKIPS = (
    "import pytest\n\npytest.importorskip('tpde_no_such_module')\n"
    "GGUF_CASES = {'qwen2': ('Qwen2Config', {}, 'Qwen2ForCausalLM', 'qwen2')}\n"
)
_FAILS = "import tpde_no_such_module  # noqa: F401\n"


def _collect(tmp_path, monkeypatch, modules: dict) -> Collected:
    """:func:`base_cases` of a stand-in package (a fresh name: no module cached) whose
    modules are ``modules``, name → source."""
    package = f"gguf_cases_standin_{next(_COUNT)}"
    folder = tmp_path / package
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return base_cases(folder, package)


def test_a_folder_test_that_skips_or_fails_at_import_is_named_and_the_rest_collected(
    tmp_path, monkeypatch
):
    collected = _collect(
        tmp_path,
        monkeypatch,
        {"test_load_a": _LLAMA, "test_load_b": _SKIPS, "test_load_c": _FAILS,
         "test_load_d": _QWEN3, "helper": _SKIPS},
    )  # fmt: skip
    assert collected.cases == {
        "llama": ("LlamaConfig", {}, "LlamaForCausalLM", "llama"),
        "qwen3": ("Qwen3Config", {}, "Qwen3ForCausalLM", "qwen3"),
    }
    assert list(collected.unread) == ["test_load_b", "test_load_c"]  # not "helper"
    assert collected.unread["test_load_b"].startswith(
        "skipped at import: could not import 'tpde_no_such_module'"
    )
    assert collected.unread["test_load_c"].startswith("failed to import: ModuleNotFoundError")
    # qwen2's case was the skipped module's: missing, and the problem names both modules
    registered = [FAMILIES[f] for f in ("llama", "qwen2", "qwen3")]
    assert missing_cases(collected.cases, registered) == ["qwen2"]
    problem = unread_problem(collected, registered)
    assert "test_load_b.py skipped at import" in problem
    assert "test_load_c.py failed to import" in problem
    assert "the GGUF families ['qwen2'] have no case" in problem
    # every case found: the failed import is still named, the skip is not
    problem = unread_problem(collected, [FAMILIES["llama"], FAMILIES["qwen3"]])
    assert "test_load_c.py failed to import" in problem and "test_load_b" not in problem


def test_a_skipped_folder_test_with_every_case_found_is_no_problem(tmp_path, monkeypatch):
    collected = _collect(tmp_path, monkeypatch, {"test_load_a": _LLAMA, "test_load_b": _SKIPS})
    assert list(collected.unread) == ["test_load_b"]
    assert unread_problem(collected, [FAMILIES["llama"]]) is None


def test_a_case_without_its_architecture_is_refused_by_name(tmp_path, monkeypatch):
    old = "GGUF_CASES = {'llama': ('LlamaConfig', {}, 'LlamaForCausalLM')}\n"
    with pytest.raises(ValueError, match=r"GGUF case of 'llama' in test_load_a is .*'phi2'\)"):
        _collect(tmp_path, monkeypatch, {"test_load_a": old})


def test_a_case_declared_twice_is_refused_naming_both_modules(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"'llama' is declared in test_load_a and in test_load_b"):
        _collect(tmp_path, monkeypatch, {"test_load_a": _LLAMA, "test_load_b": _LLAMA})
