"""The extension kit is public: every tpde.fields name docs/EXTENDING.md tells a user to use
is exported by tpde.fields (and so on an API page: tests/docs/test_site.py)."""

import re
from pathlib import Path

import tpde.fields

EXTENDING = Path(__file__).resolve().parents[2] / "docs" / "EXTENDING.md"


def test_every_fields_name_in_extending_is_public():
    named = set(re.findall(r"tpde\.fields\.([A-Za-z_]\w*)", EXTENDING.read_text()))
    folders = {"attention", "feedforward", "norms", "gradient_flow"}
    assert named, "EXTENDING.md names no tpde.fields name: the pattern is stale"
    missing = sorted(n for n in named - folders if n not in tpde.fields.__all__)
    assert not missing, f"EXTENDING.md names {missing}, not exported by tpde.fields"


def test_the_kit_is_exported_from_where_it_is_defined():
    kit = {
        "params": ("QKV", "HeadParams", "Weights", "linear"),
        "forms": ("SoftmaxForm", "key_log_weights", "key_positions"),
        "feedforward.base": ("FeedForward",),
    }
    for module, names in kit.items():
        for name in names:
            assert getattr(tpde.fields, name).__module__ == f"tpde.fields.{module}", name
