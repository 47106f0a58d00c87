"""Hypothesis strategies the property tests share."""

from __future__ import annotations

from typing import Literal

from hypothesis import strategies as st

# No lone surrogates: JSON text cannot carry them.
SURROGATES: list[Literal["Cs"]] = ["Cs"]

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

TEXT = st.text(st.characters(exclude_categories=SURROGATES), max_size=6)

# Map keys without NUL: the C++ engine's Python binding cuts keys at a NUL, so {"": ., "\0": .}
# reads there as a duplicate key, which no apiserver sees (its CEL is Go's, strings whole).
KEY = st.text(st.characters(exclude_categories=SURROGATES, exclude_characters="\0"), max_size=6)

# Device-injection annotation keys and values, so that routed annotations occur too.
INJECTION = st.sampled_from(
    ["devices.gke.io/container.main", "devices.nri.io", "cdi.nri.io/pod", "mounts.x", "devices"]
)

KEYS = KEY | INJECTION

LEAF = st.sampled_from(
    ["- path: /dev/nvidia0\n", "- nvidia.com/gpu=all", "- source: /sys", "HIP_VISIBLE_DEVICES"]
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | INT64
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
    | LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)
