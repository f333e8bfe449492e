"""Where a family's GGUF test case lives: in its own folder test (test oracle data only).

Each registered family with a GGUF map (:class:`tpde.pretrained.families.base.GGUFMap`) has
one base case, a tiny transformers model that :mod:`tests.pretrained.gguf_convert` writes as
llama.cpp's converter does and :mod:`tests.pretrained.test_gguf_converted` compares with the
folder of its values. The case is the family's test data, declared beside its folder test: a
module ``tests/pretrained/test_load*.py`` holds ``GGUF_CASES``, family → (transformers' config
class name, the config's keyword arguments, the model class name, llama.cpp's architecture) —
names, because only a test may hold transformers. The architecture is the test's own datum,
spelt as llama.cpp's converter class writes it (its ``model_arch``, gguf-py's
``MODEL_ARCH_NAMES``: ``"phi2"`` for phi, ``"gptneox"`` for gpt_neox), never read from tpde:
the oracle writes it and a test holds it equal to the family's ``GGUFMap.architecture``.

:func:`base_cases` collects them; :func:`missing_cases` names the GGUF families without one
(a test fails on it), so a new family's GGUF test is its family module plus its own test
file, with no shared list to edit. A module that skips at import (a module-level
``pytest.importorskip``) or fails to import is recorded by name, with why, and the others are
still collected (:class:`Collected`): one module cannot take the GGUF suite's cases with it.

:data:`SMALL` is the sizes the cases share: widths multiples of 32, so that every matrix fills
the 32-wide blocks of llama.cpp's quantised types (Q8_0, Q4_0).
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import NamedTuple

import pytest

from tpde.pretrained.families import ARCHITECTURES

#: The tiny sizes of the GGUF cases (module notes).
SMALL = {"vocab_size": 40, "num_hidden_layers": 2, "max_position_embeddings": 32,
         "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2}  # fmt: skip

#: The modules whose ``GGUF_CASES`` are collected: the folder tests.
PREFIX = "test_load"


class Collected(NamedTuple):
    """What :func:`base_cases` found: ``cases``, family → (config class, config, model class,
    architecture); ``unread``, module name → why its cases could not be collected (skipped at
    import, with the skip's reason, or an ImportError), in module order."""

    cases: dict
    unread: dict


def _case(family: str, case, module: str) -> tuple:
    """``case`` checked: a 4-tuple whose last item is the architecture's name, or a
    ValueError naming the module and family."""
    if not (isinstance(case, tuple) and len(case) == 4 and isinstance(case[3], str)):
        raise ValueError(
            f"the GGUF case of {family!r} in {module} is {case!r}; give (config class name, "
            "config, model class name, llama.cpp's architecture name), e.g. ('PhiConfig', "
            "{...}, 'PhiForCausalLM', 'phi2') (tests/pretrained/gguf_cases.py)."
        )
    return case


def base_cases(folder: Path | None = None, package: str | None = None) -> Collected:
    """Every ``GGUF_CASES`` of the modules ``<folder>/test_load*.py`` (default: this module's
    folder and package), in module order. A family declared twice is refused, naming both
    modules; a module that skips at import or raises ImportError is left out and recorded in
    ``unread`` (the skip's reason or the error), the others collected."""
    folder = Path(__file__).parent if folder is None else Path(folder)
    package = __package__ if package is None else package
    found, where, unread = {}, {}, {}
    for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda m: m.name):
        if not info.name.startswith(PREFIX):
            continue
        try:
            module = importlib.import_module(f"{package}.{info.name}")
        except pytest.skip.Exception as skip:
            unread[info.name] = f"skipped at import: {skip.msg}"
            continue
        except ImportError as err:
            unread[info.name] = f"failed to import: {type(err).__name__}: {err}"
            continue
        for family, case in getattr(module, "GGUF_CASES", {}).items():
            if family in found:
                raise ValueError(
                    f"the GGUF case of {family!r} is declared in {where[family]} and in "
                    f"{info.name}; keep one, in the family's own test module."
                )
            found[family], where[family] = _case(family, case, info.name), info.name
    return Collected(found, unread)


def missing_cases(cases: dict, families=ARCHITECTURES) -> list[str]:
    """The families of ``families`` (default: every registered one) with a GGUF map and no
    case in ``cases``, in registry order."""
    return [e.family for e in families if e.gguf is not None and e.family not in cases]


def unread_problem(collected: Collected, families=ARCHITECTURES) -> str | None:
    """Why the collection is not the whole of the GGUF families' cases, or None: a module
    that failed to import (always), or one skipped at import while a GGUF family has no case
    (its case may be the module's: a module holding ``GGUF_CASES`` must not skip as a whole;
    skip inside its tests or fixtures). A module skipped while every case is found is none."""
    failed = {m: why for m, why in collected.unread.items() if not why.startswith("skipped")}
    missing = missing_cases(collected.cases, families)
    shown = collected.unread if missing else failed
    if not shown:
        return None
    listed = "; ".join(f"{module}.py {why}" for module, why in shown.items())
    return (
        f"the GGUF cases of tests/pretrained/{PREFIX}*.py were not all collected: {listed}"
        + (f" (the GGUF families {missing} have no case)" if missing else "")
        + "; a module holding GGUF_CASES must import without skipping (move its "
        "pytest.importorskip into its tests or fixtures)."
    )
