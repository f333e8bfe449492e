"""Where a family's GGUF test case lives: in its own folder test (test oracle data only).

Each registered family with a GGUF map (:class:`tpde.pretrained.families.base.GGUFMap`) has
one base case, a tiny transformers model that :mod:`tests.pretrained.gguf_convert` writes as
llama.cpp's converter does and :mod:`tests.pretrained.test_gguf_converted` compares with the
folder of its values. The case is the family's test data, declared beside its folder test: a
module ``tests/pretrained/test_load*.py`` holds ``GGUF_CASES``, family → (transformers' config
class name, the config's keyword arguments, the model class name) — names, because only a
test may hold transformers. :func:`base_cases` collects them; :func:`missing_cases` names the
GGUF families without one (a test fails on it), so a new family's GGUF test is its family
module plus its own test file, with no shared list to edit.

:data:`SMALL` is the sizes the cases share: widths multiples of 32, so that every matrix fills
the 32-wide blocks of llama.cpp's quantised types (Q8_0, Q4_0).
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from tpde.pretrained.families import ARCHITECTURES

#: The tiny sizes of the GGUF cases (module notes).
SMALL = {"vocab_size": 40, "num_hidden_layers": 2, "max_position_embeddings": 32,
         "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2}  # fmt: skip

#: The modules whose ``GGUF_CASES`` are collected: the folder tests.
PREFIX = "test_load"


def base_cases() -> dict:
    """family → (config class, config, model class): every ``GGUF_CASES`` of the modules
    ``tests/pretrained/test_load*.py``, in module order. A family declared twice is refused,
    naming both modules."""
    found, where = {}, {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if not info.name.startswith(PREFIX):
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        for family, case in getattr(module, "GGUF_CASES", {}).items():
            if family in found:
                raise ValueError(
                    f"the GGUF case of {family!r} is declared in {where[family]} and in "
                    f"{info.name}; keep one, in the family's own test module."
                )
            found[family], where[family] = case, info.name
    return found


def missing_cases(cases: dict, families=ARCHITECTURES) -> list[str]:
    """The families of ``families`` (default: every registered one) with a GGUF map and no
    case in ``cases``, in registry order."""
    return [e.family for e in families if e.gguf is not None and e.family not in cases]
