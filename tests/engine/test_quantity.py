"""Quantities are read the way the apiserver reads them."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.quantity import MAX_QUANTITY, QuantityError, format_bytes, parse_quantity


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


# --- bounded work: anyone who reaches the webhook chooses these strings ---------------------

_NANO = 10**9
# Every exact value the apiserver can hold: whole nano units up to 2^63-1.
_CEILING = Fraction(MAX_QUANTITY)


@pytest.mark.parametrize(
    "text,says",
    [
        ("1e10000000", "larger than Kubernetes allows"),
        ("1E999999999999999999999", "larger than Kubernetes allows"),
        ("9223372036854775808", "larger than Kubernetes allows"),
        ("8Ei", "larger than Kubernetes allows"),
        ("10000000000000000000000m", "larger than Kubernetes allows"),
        ("9" * 5000, "longer than Kubernetes allows"),
        ("1" * 5000 + "x", "longer than Kubernetes allows"),  # the old regex took 1 s on it
        (10**5000, "larger than Kubernetes allows"),
        (-(2**63), "larger than Kubernetes allows"),
        (1e300, "larger than Kubernetes allows"),
        (float("inf"), "not a quantity"),
        (float("nan"), "not a quantity"),
        ("٣", "not a quantity"),  # a digit to Python's \d, not to Kubernetes
        ("1\n", None),
    ],
    ids=lambda v: "huge-int" if isinstance(v, int) and v.bit_length() > 64 else repr(v)[:24],
)
def test_absurd_values_are_refused_at_once_with_a_reason(text: object, says: str | None) -> None:
    if says is None:
        assert parse_quantity(text) == 1
        return
    with pytest.raises(QuantityError, match=says) as err:
        parse_quantity(text)
    assert len(str(err.value)) < 200, "the message quotes a cut value, never megabytes"


@pytest.mark.parametrize(
    "text,value",
    [
        ("9223372036854775807", MAX_QUANTITY),
        ("7Ei", 7 * 2**60),
        ("0e99999999", 0),
        ("-0.0", 0),
        ("1n", Fraction(1, _NANO)),
        ("0.5n", Fraction(1, _NANO)),  # resource.Quantity rounds up to whole nano units
        ("1e-100000000", Fraction(1, _NANO)),
        ("-1.5n", Fraction(-2, _NANO)),
        ("0." + "0" * 100 + "1e110", 10**9),
    ],
)
def test_extremes_are_read_as_kubernetes_keeps_them(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.one_of(
        st.text(max_size=60),
        st.text(alphabet="0123456789.+-eEKMGTPinumk ", max_size=60),
        st.from_regex(r"\A[+-]?[0-9]{0,30}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,12})?\Z"),
        st.from_regex(r"\A[0-9]{1,25}(\.[0-9]{0,12})?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])\Z"),
        st.integers(),
        st.floats(),
        st.none(),
        st.booleans(),
    )
)
def test_anything_parses_to_a_bounded_value_or_is_refused(value: object) -> None:
    """No other exception, and a result always small: work on it stays bounded."""
    try:
        result = parse_quantity(value)
    except QuantityError:
        return
    assert abs(result) <= _CEILING  # type: ignore[operator]
    assert _NANO % result.denominator == 0
    # Whole amounts come back as ints, which add and compare in C; only the rest as Fractions.
    assert type(result) is (int if result.denominator == 1 else Fraction)


_SUFFIX_VALUES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(0, MAX_QUANTITY), st.sampled_from(sorted(_SUFFIX_VALUES)))
def test_canonical_whole_quantities_round_trip(count: int, suffix: str) -> None:
    count //= _SUFFIX_VALUES[suffix]
    assert parse_quantity(f"{count}{suffix}") == count * _SUFFIX_VALUES[suffix]
    assert type(parse_quantity(f"{count}{suffix}")) is int
    assert parse_quantity(f"-{count}{suffix}") == -count * _SUFFIX_VALUES[suffix]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(-MAX_QUANTITY * _NANO, MAX_QUANTITY * _NANO))
def test_canonical_fractional_quantities_round_trip(nanos: int) -> None:
    exact = Fraction(nanos, _NANO)
    sign = "-" if nanos < 0 else ""
    whole, frac = divmod(abs(nanos), _NANO)
    assert parse_quantity(f"{sign}{whole}.{frac:09d}") == exact
    assert parse_quantity(f"{nanos}n") == exact
    assert parse_quantity(f"{nanos}e-9") == exact
