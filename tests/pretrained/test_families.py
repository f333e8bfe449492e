"""The family registry: one module per family, each registering its entry when imported."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

from tpde.pretrained import ARCHITECTURES, families
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
