"""How big the added /dev/shm is, for any memory limit and any gpu-shm settings.

A memory-backed emptyDir is charged to the container's memory: the share of the limit is
clamped to [minSize, maxSize], but the floor never lifts it past half the limit, so a small
limit is never handed over to /dev/shm whole (a 512Mi limit gets 256Mi, not 512Mi).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.pipeline import Stage
from webhook.quantity import parse_quantity
from webhook.ruleset.models import RuleSet

MI = 2**20


def _pod(memory: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "memory": memory}
    container = {"name": "server", "image": "vllm/vllm:v0.9", "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [container]}}  # fmt: skip


def _shm_bytes(rules: Any, memory: str) -> int:
    decision = evaluate(subject_for(_pod(memory), namespace="ml-team"), rules, stage=Stage.MUTATE)
    (volume,) = next(op["value"] for op in decision.patch if op["path"] == "/spec/volumes")
    return int(parse_quantity(volume["emptyDir"]["sizeLimit"]))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    limit_mi=st.integers(1, 300 * 1024),
    fraction=st.sampled_from([0.1, 0.25, 0.5, 0.75, 1.0]),
    low_mi=st.sampled_from([64, 512, 1024, 4096]),
    high_gi=st.sampled_from([4, 16, 64]),
)
def test_the_size_is_the_share_within_the_bounds_and_the_floor_stops_at_half_the_limit(
    limit_mi: int, fraction: float, low_mi: int, high_gi: int
) -> None:
    settings_ = {"memoryFraction": fraction, "minSize": f"{low_mi}Mi", "maxSize": f"{high_gi}Gi"}
    rules = compile_rules(RuleSet.model_validate({"rules": {"gpu-shm": settings_}}))
    size = _shm_bytes(rules, f"{limit_mi}Mi")
    limit, low, high = limit_mi * MI, low_mi * MI, high_gi * 2**30
    share = int(limit * fraction)
    assert 0 < size <= min(limit, high)
    if share >= low:  # the floor plays no part: the share, capped, in whole mebibytes
        assert size == min(share, high) // MI * MI
    else:  # lifted towards the floor, but never past half the limit (nor the share's own)
        assert size >= min(share, high) // MI * MI
        assert size <= max(share, limit // 2)
        if low <= limit // 2 and low <= high:  # the floor fits: it is the size
            assert size == low


def test_the_shipped_settings_on_small_limits() -> None:
    rules = compile_rules(RuleSet())
    for memory, expected in [("512Mi", 256), ("1Gi", 512), ("1536Mi", 768), ("2Gi", 1024),
                             ("3Gi", 1536), ("64Gi", 16384)]:  # fmt: skip
        assert _shm_bytes(rules, memory) == expected * MI, memory
