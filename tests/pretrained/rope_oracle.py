"""transformers' RoPE code in float64, for the RoPE-scaling oracles.

transformers forms RoPE frequencies and tables in float32 whatever the model's dtype
(``dtype=torch.float``, ``torch.float32``, ``.float()``), 1e-7 apart from float64. The oracle
runs transformers' *own* source with those casts read as float64 (:func:`in_float64`: the
function's text, three substitutions, compiled in its module's namespace), so that every
formula — ``ROPE_INIT_FUNCTIONS``, ``dynamic_rope_update``, the rotary modules' ``forward``
and ``compute_default_rope_parameters`` — is transformers', only in float64.
:func:`float64_rope` installs them for a test.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import textwrap

import torch

#: transformers' float32 casts → float64 (the only edits of its source).
CASTS = (
    ("dtype=torch.float32", "dtype=torch.float64"),
    ("dtype=torch.float)", "dtype=torch.float64)"),
    ("dtype=torch.float,", "dtype=torch.float64,"),
    (".float()", ".double()"),
)


def in_float64(function):
    """``function`` (a plain or decorated function or method) recompiled from its source
    with :data:`CASTS` applied, in its module's namespace; AssertionError if nothing changed
    (the source no longer casts to float32: the oracle would be a copy of the original)."""
    source = textwrap.dedent(inspect.getsource(function))
    changed = source
    for old, new in CASTS:
        changed = changed.replace(old, new)
    assert changed != source, f"{function.__qualname__} has no float32 cast left to change"
    namespace = dict(vars(sys.modules[function.__module__]))
    exec(compile(changed, f"<{function.__qualname__} in float64>", "exec"), namespace)
    return namespace[function.__name__]


def init_functions_in_float64() -> dict:
    """rope_type → transformers' ``ROPE_INIT_FUNCTIONS[rope_type]`` in float64."""
    from transformers import modeling_rope_utils

    return {
        name: in_float64(function)
        for name, function in modeling_rope_utils.ROPE_INIT_FUNCTIONS.items()
        if name != "proportional"
    }


@contextlib.contextmanager
def float64_rope(*rotary_classes):
    """While active: transformers' ``ROPE_INIT_FUNCTIONS`` and the ``forward`` of each rotary
    class in float64, and float64 the default dtype (``dynamic_rope_update`` forms the NTK base
    from an integer tensor, in the default dtype). Build the model inside it."""
    from transformers import modeling_rope_utils

    table = modeling_rope_utils.ROPE_INIT_FUNCTIONS
    saved_table = dict(table)
    methods = [
        (cls, name)
        for cls in rotary_classes
        for name in ("forward", "compute_default_rope_parameters")  # the unscaled layers' too
        if name in vars(cls)
    ]
    saved = {(cls, name): vars(cls)[name] for cls, name in methods}
    saved_dtype = torch.get_default_dtype()
    try:
        table.update(init_functions_in_float64())
        for cls, name in methods:
            setattr(cls, name, in_float64(getattr(cls, name)))
        torch.set_default_dtype(torch.float64)
        yield
    finally:
        torch.set_default_dtype(saved_dtype)
        table.clear()
        table.update(saved_table)
        for (cls, name), method in saved.items():
            setattr(cls, name, method)
