"""The fast path's byte scan: grouping markers under gates is only a speed-up, so it must
answer exactly as scanning for every marker would, on any bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from webhook.engine.prefilter import gated, markers, might_apply
from webhook.ruleset.models import RuleSet

SHIPPED = markers(RuleSet())
# Bytes built from pieces of the markers (and near misses), so that markers, gates without
# their marker, and markers split across pieces all occur.
PIECES = st.sampled_from(
    [*(SHIPPED or ()), b"Exists", b".com/", b"nvidia", b".com", b"/gpu", b'"key":"', b"x", b"{"]
)


def _scan(raw: bytes, found: tuple[bytes, ...]) -> bool:
    return any(m in raw for m in found)


@given(st.lists(PIECES, max_size=12).map(b"".join))
def test_the_gated_scan_answers_as_a_scan_for_every_marker(raw: bytes) -> None:
    assert SHIPPED is not None
    assert might_apply(raw, gated(SHIPPED)) is _scan(raw, SHIPPED)


@given(
    st.lists(st.sampled_from(["nvidia.com/*", "amd.com/gpu", "example.io/accel", "x.ai/tpu"]),
             min_size=1, max_size=4),
    st.lists(PIECES | st.sampled_from([b"example.io/", b"x.ai/", b"example.io/accel"]),
             max_size=10).map(b"".join),
)  # fmt: skip
def test_any_rule_sets_markers_keep_that_answer(resources: list[str], raw: bytes) -> None:
    found = markers(RuleSet.model_validate({"gpuResources": resources}))
    assert found is not None
    assert might_apply(raw, gated(found)) is _scan(raw, found)


def test_a_gpu_resource_domain_is_scanned_first() -> None:
    groups = gated(SHIPPED)
    assert groups is not None
    assert groups[0][0] == b".com/" and b"nvidia.com/" in groups[0][1]
