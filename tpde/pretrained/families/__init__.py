r"""The families :func:`tpde.pretrained.load` reads: one module per family, each registering
its :class:`~tpde.pretrained.families.base.Family` entry when imported.

Every module of this folder is imported here (a new module is found, with no list to
edit): a new family is one file — its config keys, its weight names, its GGUF map and its
pieces, its ``summary`` — plus its test (with a GGUF map, its ``GGUF_CASES`` there). The
record and the registry live in :mod:`~tpde.pretrained.families.base`, which imports none
of them.

The table of the families — each entry's ``model_type`` values, norm, placement and
``summary`` — is built from this registry for the documentation (``docs/api/pretrained.rst``,
"Families"); :data:`~tpde.pretrained.families.base.ARCHITECTURES` holds the entries at run
time.

GGUF files: those of the families with a ``gguf`` map
(:class:`~tpde.pretrained.families.base.GGUFMap`), through the one translator
:mod:`tpde.pretrained._gguf`; :func:`~tpde.pretrained.gguf_architectures`
lists their architectures at run time, and the documentation's table of them is built from
the maps.

Every key of transformers' config class of a family is read or listed as irrelevant
(:data:`~tpde.pretrained.families.base.COMMON_IRRELEVANT`, ``Family.irrelevant``); a key
config.json lacks reads as that class's default (tests/pretrained/test_config_keys.py).

Every layer is the field ``Normalized(attention, N₁) + Normalized(mlp, N₂)`` (MATH.md §8):
its Lie–Trotter step of size 1 with Euler sub-steps is the network's block. A parallel block
(``parallel``: GPT-NeoX, Phi, GPT-J, Falcon's default) is
``Sum([Parallel([Normalized(attention, N₁), Normalized(mlp, N₂)])])``, one part whose Euler
step is x + Attn(N₁x) + F(N₂x) (N₂ = N₁ where the block has one norm). Every decoder (all
but bert and albert) reads the ``score`` head of its ``*ForSequenceClassification`` (W_s
N_out(x_L)_{n−1}, the last token, no bias, no soft-cap); bert and albert read their
classifiers on the pooled first token. A mixture-of-experts MLP (mixtral, qwen2_moe) is one
feed-forward field (:class:`~tpde.fields.MixtureOfExperts`); ``Transformer.split(mu,
experts=True)`` splits its sub-step into the per-expert terms g_e(x) F_e(N₂x) (0 where
expert e is not routed).
"""

import importlib
import pkgutil

from tpde.pretrained.families.base import (
    ACTIVATIONS_HF,
    ARCHITECTURES,
    FAMILIES,
    REQUIRED,
    Architecture,
    Family,
    GGUFMap,
    register,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def gguf_architectures() -> dict[str, str]:
    """The GGUF files :func:`tpde.pretrained.load` reads: each ``general.architecture`` with a
    :class:`~tpde.pretrained.families.base.GGUFMap` among the registered families → that
    family's name, in registration order. (Defined here, beside the import of every family,
    not in :mod:`~tpde.pretrained.families.base`: the documentation shows it as
    ``tpde.pretrained.gguf_architectures``, and a module whose objects are shown under two
    names breaks viewcode's links to its source.)

    The one list of them (the documentation's table and README point here): a new family's
    module with a ``gguf`` map adds its architecture; a file of any other is refused, naming
    it and listing these.

    Returns
    -------
    dict
        llama.cpp's architecture name → family name, e.g. ``"llama": "llama"``,
        ``"phi2": "phi"``, ``"gptneox": "gpt_neox"``.
    """
    return {e.gguf.architecture: e.family for e in ARCHITECTURES if e.gguf is not None}


__all__ = [
    "ACTIVATIONS_HF",
    "ARCHITECTURES",
    "FAMILIES",
    "REQUIRED",
    "Architecture",
    "Family",
    "GGUFMap",
    "gguf_architectures",
    "register",
]
