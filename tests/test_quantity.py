"""Quantities are read the way the apiserver reads them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from webhook.quantity import QuantityError, format_bytes, parse_quantity


@pytest.mark.parametrize(
    "text,value",
    [
        ("1", 1),
        (2, 2),
        ("500m", Fraction(1, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("16Gi", 16 * 2**30),
        ("1536Mi", 1536 * 2**20),
        ("64G", 64 * 10**9),
        ("1e3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("2k", 2000),
        (" 4 ", 4),
        ("+3", 3),
        (1.5, Fraction(3, 2)),
    ],
)
def test_quantities_parse_exactly(text: object, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "lots", "1.2.3", "5 Gi", "Gi", "1x", True, None, [1], "1KI"])
def test_junk_is_not_a_quantity(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    "count,text",
    [(2**30, "1Gi"), (1536 * 2**20, "1536Mi"), (16 * 2**30, "16Gi"), (10**9, "1000000000")],
)
def test_byte_counts_render_in_the_largest_exact_unit(count: int, text: str) -> None:
    assert format_bytes(count) == text
    assert parse_quantity(text) == count
