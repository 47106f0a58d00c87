"""Kubernetes resource quantities ("500m", "16Gi", "1e3") as exact fractions.

Hand-written rather than taken from the `kubernetes` client: importing that package costs
half a second and drags the API client into the pure engine, and the grammar is small.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["QuantityError", "format_bytes", "parse_quantity", "show"]

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}

_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity as the apiserver does; ints and floats from YAML are accepted too."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    return _parse_text(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """Cached: the same few strings ("1", "64Gi") arrive on every request."""
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity")
    number = Fraction(match["num"])
    if match["exp"]:
        return number * Fraction(10) ** int(match["exp"][1:])
    return number * _SUFFIXES[match["suffix"] or ""]


def show(value: Fraction | int) -> str:
    """A count for a message: 2, or 0.5 when it is not whole."""
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def format_bytes(value: Fraction | int) -> str:
    """Render a byte count in the largest binary unit that divides it exactly."""
    count = int(value)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if count and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)
