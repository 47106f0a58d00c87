"""Kubernetes resource quantities ("500m", "16Gi", "1e3") as exact numbers: ints when whole,
Fractions otherwise.

Hand-written rather than taken from the `kubernetes` client: importing that package costs
half a second and drags the API client into the pure engine, and the grammar is small.

Bounded work: anyone who can reach the webhook can send any string, so a quantity is checked
for length and order of magnitude *before* any big-number arithmetic. Values are what the
apiserver would store: at most 2^63-1 in the base unit (larger ones are refused, never
computed), and rounded up to whole nano units (1n), as `resource.Quantity` rounds them.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = [
    "MAX_QUANTITY",
    "MAX_TEXT",
    "Amount",
    "QuantityError",
    "format_bytes",
    "parse_quantity",
    "show",
]

# resource.Quantity's ceiling: max int64 in the base unit after scaling.
MAX_QUANTITY = 2**63 - 1
# The longest quantity text we read. The apiserver sends quantities in canonical form
# ("9223372036854775807", "1500m", "0.000000001"), far shorter; this leaves room for the
# zero-padded spellings people write by hand and stops the regex and int() from seeing
# megabytes of digits.
MAX_TEXT = 128
_NANO = 10**9

# suffix -> (multiplier, divisor, decimal order of magnitude it adds, rounded up)
_SUFFIXES: dict[str, tuple[int, int, int]] = {
    "": (1, 1, 0),
    "n": (1, 10**9, -9),
    "u": (1, 10**6, -6),
    "m": (1, 10**3, -3),
    "k": (10**3, 1, 3),
    "M": (10**6, 1, 6),
    "G": (10**9, 1, 9),
    "T": (10**12, 1, 12),
    "P": (10**15, 1, 15),
    "E": (10**18, 1, 18),
    "Ki": (2**10, 1, 4),
    "Mi": (2**20, 1, 7),
    "Gi": (2**30, 1, 10),
    "Ti": (2**40, 1, 13),
    "Pi": (2**50, 1, 16),
    "Ei": (2**60, 1, 19),
}

# ASCII digits only (`\d` would take Arabic-Indic digits, which Kubernetes refuses).
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)",
    re.ASCII,
)


# A parsed quantity. Whole amounts (nearly all: "1", "16Gi") are ints, the rest exact
# Fractions: an int adds and compares in C, a Fraction in pure Python, several times a request.
Amount = int | Fraction


class QuantityError(ValueError):
    """The value is not a Kubernetes quantity, or one Kubernetes would not keep."""


def _short(value: object) -> str:
    """The value for a message, cut so a megabyte of digits never reaches a response."""
    if isinstance(value, bool):
        return "true" if value else "false"  # as the manifest spells it, not Python's True
    if isinstance(value, int) and value.bit_length() > 128:  # repr() fails past 4,300 digits
        return f"an integer of {value.bit_length()} bits"
    if not isinstance(value, str | int | float | None):
        return f"a {type(value).__name__}"  # a repr of nested lists may be huge or recurse
    if isinstance(value, str) and len(value) > 40:
        return f"{value[:32]!r}…({len(value)} characters)"
    return repr(value)


def parse_quantity(value: object) -> Amount:
    """Parse a quantity as the apiserver does; ints and floats from YAML are accepted too."""
    if isinstance(value, bool):
        raise QuantityError(f"{_short(value)} is not a quantity")
    if isinstance(value, int):
        if abs(value) > MAX_QUANTITY:
            raise QuantityError(f"{_short(value)} is larger than Kubernetes allows (2^63-1)")
        return value
    if isinstance(value, float):
        return parse_quantity(repr(value))  # "inf" and "nan" fail the grammar
    if not isinstance(value, str):
        raise QuantityError(f"{_short(value)} is not a quantity")
    text = value.strip()
    if len(text) > MAX_TEXT:
        raise QuantityError(
            f"{_short(value)} is longer than Kubernetes allows for a quantity "
            f"(at most {MAX_TEXT} characters)"
        )
    return _parse_text(text)


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Amount:
    """Cached: the same few strings ("1", "64Gi") arrive on every request. Keys are at most
    MAX_TEXT long, so the cache is bounded in memory too."""
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(f"{_short(text)} is not a quantity")
    whole, frac = match["int"], match["frac"] or ""
    digits = (whole + frac).lstrip("0")
    if not digits:
        return 0
    negative = match["sign"] == "-"
    mantissa = int(digits)  # at most MAX_TEXT digits: far below int()'s 4,300-digit limit
    exponent = -len(frac)  # value = mantissa * 10**exponent * multiplier / divisor
    if match["exp"] is not None:
        exponent += int(match["exp"])  # at most MAX_TEXT digits too
        multiplier, divisor, order = 1, 1, 0
    else:
        multiplier, divisor, order = _SUFFIXES[match["suffix"] or ""]
    # The value lies in [10**magnitude, 10**(magnitude + 1)), give or take the one order a
    # binary suffix rounds up: the extremes are decided without building huge numbers.
    magnitude = len(digits) - 1 + exponent + order
    if magnitude > 19:
        raise QuantityError(f"{_short(text)} is larger than Kubernetes allows (2^63-1)")
    if magnitude < -10:
        # Below 1n: Kubernetes rounds any non-zero amount up to the smallest it keeps.
        return Fraction(-1 if negative else 1, _NANO)
    if exponent >= 0:
        amount = Fraction(mantissa * 10**exponent * multiplier, divisor)
    else:
        amount = Fraction(mantissa * multiplier, 10**-exponent * divisor)
    if amount > MAX_QUANTITY:
        raise QuantityError(f"{_short(text)} is larger than Kubernetes allows (2^63-1)")
    if (amount * _NANO).denominator != 1:
        # Finer than 1n: rounded up (away from zero), as resource.Quantity does.
        amount = Fraction(-(-amount.numerator * _NANO // amount.denominator), _NANO)
    if negative:
        amount = -amount
    return amount.numerator if amount.denominator == 1 else amount


def positive(amount: Amount) -> bool:
    """`amount > 0`, without Fraction's pure-Python comparison (an ABC check per call): a
    Fraction's sign is its numerator's. Asked several times per GPU pod."""
    return amount.numerator > 0


def show(value: Amount) -> str:
    """A count for a message: 2, or 0.5 when it is not whole (at most three decimals: a share
    of a GPU's memory is 0.502, not 0.5022131217891342)."""
    if value.denominator == 1:
        return str(value.numerator)
    short = f"{float(value):.3f}".rstrip("0").rstrip(".")
    return short if short.strip("-") != "0" else str(float(value))  # 1n is not 0


def format_bytes(value: Amount) -> str:
    """Render a byte count in the largest binary unit that divides it exactly."""
    count = int(value)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _SUFFIXES[suffix][0]
        if count and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)
