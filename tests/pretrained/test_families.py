"""The family registry: one module per family, each registering its entry when imported."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

from tpde.pretrained import ARCHITECTURES, LoadError, families, gguf_architectures
from tpde.pretrained._gguf import gguf_family
from tpde.pretrained.families import FAMILIES, Family, register


def test_every_module_of_the_folder_registers_its_family():
    """A family is one file: each module holds (and registered) the entry named as it."""
    modules = [m.name for m in pkgutil.iter_modules(families.__path__) if m.name != "base"]
    owners = {}
    for name in modules:
        module = importlib.import_module(f"tpde.pretrained.families.{name}")
        own = [v for v in vars(module).values() if isinstance(v, Family)]
        owners[name] = [entry.family for entry in own if entry.family == name]
    assert all(owners[name] == [name] for name in modules), owners
    assert sorted(FAMILIES) == sorted(modules)
    assert list(ARCHITECTURES) == list(FAMILIES.values())


def test_register_refuses_a_second_claim(monkeypatch):
    monkeypatch.setattr(families.base, "FAMILIES", dict(FAMILIES))
    monkeypatch.setattr(families.base, "ARCHITECTURES", list(ARCHITECTURES))
    llama = FAMILIES["llama"]
    with pytest.raises(ValueError, match=r"the family 'llama' claims .*'llama' already holds"):
        register(llama)
    clone = dataclasses.replace(llama, family="llama2", model_types=("mistral",), gguf=None)
    with pytest.raises(ValueError, match=r"claims \['mistral'\], which the family 'mistral'"):
        register(clone)
    clone = dataclasses.replace(llama, family="llama2", model_types=("llama2",))
    with pytest.raises(ValueError, match=r"both read GGUF files of architecture 'llama'"):
        register(clone)
    with pytest.raises(TypeError, match="register takes a Family; received dict"):
        register({"family": "x"})
    fresh = dataclasses.replace(llama, family="llama2", model_types=("llama2",), gguf=None)
    assert register(fresh) is fresh and families.base.FAMILIES["llama2"] is fresh


def test_gguf_architectures_are_the_files_load_reads():
    """``gguf_architectures()``: each architecture the translator picks a family for (that
    family), and the list a file of any other architecture is refused with."""
    archs = gguf_architectures()
    assert {"llama": "llama", "phi2": "phi", "gptneox": "gpt_neox"}.items() <= archs.items()
    assert list(archs.values()) == [e.family for e in ARCHITECTURES if e.gguf is not None]
    for architecture, family in archs.items():
        assert gguf_family(architecture, "m.gguf").family == family
    known = ", ".join(archs)
    with pytest.raises(
        LoadError, match=rf"architecture 'bloom' .*; tpde reads GGUF files of {known}\.$"
    ):
        gguf_family("bloom", "m.gguf")
    assert all(isinstance(FAMILIES[f].gguf.notes, str) for f in archs.values())  # may be empty
