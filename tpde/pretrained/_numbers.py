"""The checks of one number read from a model's files (config.json or GGUF metadata)."""

from __future__ import annotations

import math
import numbers

__all__ = ["checked_integer", "checked_positive"]


def checked_integer(value, where: str, error: type, *, low: int = 1, said="received") -> int:
    """``value`` as an int ≥ ``low``, else ``error`` naming ``where`` (the file and key) and
    what it holds (``said``: "received", "the file holds"); a bool is not an integer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise error(f"{where} must be an integer; {said} {value!r} ({type(value).__name__}).")
    if value < low:
        raise error(f"{where} must be an integer >= {low}; {said} {value}.")
    return int(value)


def checked_positive(value, where: str, error: type, *, said="received") -> float:
    """``value`` as a finite float > 0, else ``error`` naming ``where`` and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(f"{where} must be a number; {said} {value!r} ({type(value).__name__}).")
    if not (math.isfinite(value) and value > 0):
        raise error(f"{where} must be finite and > 0; {said} {value!r}.")
    return float(value)
