"""GPU holds: released by the watch, gone after their time, bounded against forged reviews,
and read in O(1) however many there are."""

from __future__ import annotations

import dataclasses
import time
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.facts import full_facts
from webhook.engine.build import engine_build
from webhook.facts import reservations as reservations_module
from webhook.facts.model import (
    Facts,
    NodeIndex,
    PodGpus,
    Quota,
    Usage,
)
from webhook.facts.reservations import Reservations, ReservingFacts

GPU = "nvidia.com/gpu"
H100 = "NVIDIA-H100-80GB-HBM3"


def pod(
    name: str, gpus: int = 1, namespace: str = "ml", product: str = "", reach: tuple[str, ...] = ()
) -> PodGpus:
    return PodGpus(namespace, name, "Pending", {GPU: Fraction(gpus)}, product=product, reach=reach)


def held_gpus(r: Reservations, namespace: str = "ml") -> Fraction:
    total = r.usage(namespace)
    return total.by_resource.get(GPU, Fraction(0)) if total is not None else Fraction(0)  # type: ignore[return-value]


class Snapshot:
    """A base source with 3 GPUs in use in every namespace."""

    def node_index(self) -> NodeIndex:
        return NodeIndex()

    def served_names(self) -> frozenset[str]:
        return frozenset()

    def facts_for(self, namespace: str) -> Facts:
        usage = Usage(by_resource={GPU: Fraction(3)}, by_product={(GPU, H100): Fraction(3)})
        return Facts(namespace, {}, (), usage, {}, NodeIndex())


def test_a_hold_counts_until_its_time_is_up() -> None:
    r = Reservations(ttl=30)
    r.hold(pod("a", 2), now=100.0)
    assert held_gpus(r) == 2
    assert r.expire(now=129.9) == 0
    assert held_gpus(r) == 2
    assert r.expire(now=130.0) == 1
    assert r.usage("ml") is None and r.count == 0


def test_expiry_drops_holds_in_every_namespace_and_forgets_the_namespaces() -> None:
    r = Reservations(ttl=10)
    for i in range(50):
        r.hold(pod("p", namespace=f"gone-{i}"), now=float(i))
    assert r.expire(now=30.0) == 21  # held at 0..20, due at 10..30
    assert r.count == 29
    assert r.expire(now=1000.0) == 29
    assert not r._namespaces  # nothing left for namespaces never seen again


def test_a_repeated_review_for_one_pod_replaces_its_hold_never_stacks() -> None:
    r = Reservations(ttl=30)
    for i in range(100):
        r.hold(pod("forged", 8), now=float(i))
    assert r.count == 1
    assert held_gpus(r) == 8  # one pod's worth
    assert r.expire(now=99.0 + 29.9) == 0  # the last one counts from its own time...
    assert r.expire(now=99.0 + 30.0) == 1  # ...and never longer than ttl after it


def test_a_replacement_with_other_gpus_recounts_the_total() -> None:
    r = Reservations(ttl=30)
    r.hold(pod("p", 4, product=H100), now=0.0)
    r.hold(pod("p", 1), now=1.0)
    total = r.usage("ml")
    assert total is not None
    assert total.by_resource == {GPU: 1}
    assert total.by_product == {}  # the H100 amount went with the old hold, not left at 0


def test_holds_are_capped_in_all_and_the_oldest_goes_first() -> None:
    r = Reservations(ttl=30, max_holds=10, max_per_namespace=10)
    for i in range(25):
        r.hold(pod(f"p{i}", namespace=f"ns{i % 5}"), now=float(i))
    assert r.count == 10
    assert r.dropped == 15
    kept = sorted(p.name for ns in range(5) for p in r.held(f"ns{ns}", now=0.0))
    assert kept == sorted(f"p{i}" for i in range(15, 25))
    assert sum(held_gpus(r, f"ns{ns}") for ns in range(5)) == 10


def test_one_namespace_cannot_take_every_hold() -> None:
    r = Reservations(ttl=30, max_holds=100, max_per_namespace=5)
    r.hold(pod("victim", namespace="other"), now=0.0)
    for i in range(1000):
        r.hold(pod(f"flood-{i}", namespace="attacker"), now=1.0)
    assert len(r.held("attacker", now=1.0)) == 5
    assert held_gpus(r, "attacker") == 5
    assert [p.name for p in r.held("other", now=1.0)] == ["victim"]


def test_the_default_namespace_cap_is_a_tenth_of_all_holds() -> None:
    assert Reservations(max_holds=10_000).max_per_namespace == 1_000


@pytest.mark.parametrize(
    "forged",
    [
        pod("x" * 254),
        pod("p", namespace="n" * 64),
        PodGpus("ml", "p", "Pending", {f"r{i}.shared": Fraction(1) for i in range(100)}),
        pod("p", reach=tuple(f"product-{i}" for i in range(1000))),
        pod("p", product="x" * 64),
        PodGpus("ml", "p", "Pending", {}),
    ],
    ids=[
        "long name",
        "long namespace",
        "many resources",
        "many products",
        "long product",
        "no gpus",
    ],
)
def test_a_pod_no_apiserver_would_send_holds_nothing(forged: PodGpus) -> None:
    r = Reservations(ttl=30)
    r.hold(forged, now=0.0)
    assert r.count == 0


def test_the_watch_releases_a_hold_by_name() -> None:
    r = Reservations(ttl=30)
    r.hold(pod("train-0", 2), now=0.0)
    r.hold(pod("train-1", 2), now=0.0)
    r.release_for(PodGpus("ml", "train-0", "Running", {GPU: Fraction(2)}))
    assert [p.name for p in r.held("ml", now=0.0)] == ["train-1"]
    assert held_gpus(r) == 2
    r.release_for(PodGpus("other", "train-1", "Running", {GPU: Fraction(2)}))  # other namespace
    assert held_gpus(r) == 2


def test_a_generate_name_hold_is_released_by_the_pod_that_got_the_name() -> None:
    r = Reservations(ttl=30)
    r.hold(pod("train-", 2), now=0.0)
    r.release_for(PodGpus("ml", "train-x7k2q", "Pending", {GPU: Fraction(1)}))  # other GPUs
    assert r.count == 1
    r.release_for(PodGpus("ml", "train-x7k2q", "Pending", {GPU: Fraction(2)}))
    assert r.count == 0 and r.usage("ml") is None


def test_a_hold_period_of_zero_disables_holds() -> None:
    r = Reservations(ttl=0)
    r.hold(pod("a", 4), now=0.0)
    assert r.count == 0
    source = ReservingFacts(Snapshot(), r)
    assert source.facts_for("ml").usage.by_resource[GPU] == 3


def test_facts_count_the_holds_of_their_namespace_only() -> None:
    r = Reservations(ttl=30)
    source = ReservingFacts(Snapshot(), r)
    r.hold(pod("a", 2, product=H100))
    r.hold(pod("b", 1, namespace="web"))
    facts = source.facts_for("ml")
    assert facts.usage.by_resource[GPU] == 5
    assert facts.usage.by_product[(GPU, H100)] == 5
    assert source.facts_for("quiet").usage.by_resource[GPU] == 3
    before = facts.usage.by_resource[GPU]
    r.hold(pod("c", 4))
    assert facts.usage.by_resource[GPU] == before  # handed-out facts never change


@pytest.mark.skipif(
    engine_build() == "mypyc",
    reason="counts calls by replacing a function, which compiled callers never see; the "
    "interpreted run of the same source checks it",
)
def test_reading_facts_does_no_work_per_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """O(1) reads: the total is kept as holds come and go, never summed over them."""
    charged: list[int] = []
    real = reservations_module._charge

    def counting(total: Usage, p: PodGpus, sign: int) -> None:
        charged.append(sign)
        real(total, p, sign)

    monkeypatch.setattr(reservations_module, "_charge", counting)
    r = Reservations(ttl=30)
    source = ReservingFacts(Snapshot(), r)
    for i in range(500):
        r.hold(pod(f"p{i}"), now=1e12)  # far in the future: nothing expires on read
    assert len(charged) == 500  # one update per hold taken
    charged.clear()
    for _ in range(100):
        assert source.facts_for("ml").usage.by_resource[GPU] == 503
    assert charged == []


def test_facts_drop_expired_holds_even_without_the_timer() -> None:
    r = Reservations(ttl=30)
    source = ReservingFacts(Snapshot(), r)
    r.hold(pod("a", 2), now=time.monotonic() - 31)
    assert source.facts_for("ml").usage.by_resource[GPU] == 3
    assert r.count == 0


def test_facts_with_holds_keep_all_else_the_source_said() -> None:
    """Only usage changes: a field added to Facts and left out of `with_usage` would read as
    its default (no config maps known, no DRA) in every namespace with a hold."""
    full = full_facts()

    class Source(Snapshot):
        def facts_for(self, namespace: str) -> Facts:
            return full

    r = Reservations(ttl=30)
    r.hold(pod("a", 2))
    got = ReservingFacts(Source(), r).facts_for("ml")
    assert got.usage.by_resource[GPU] == 5
    assert got == dataclasses.replace(full, usage=got.usage, unheld=None, usages=got.usages)
    assert got.usages is not None and got.usages.usage("ml").by_resource[GPU] == 2
    assert full.usage.by_resource[GPU] == 3  # the source's facts are left as they were


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["hold", "release", "wait"]),
        st.sampled_from(["ml", "web", "ci"]),
        st.sampled_from(["a", "b", "c", "d", "train-"]),
        st.integers(1, 3),
        st.sampled_from([(), (H100,), (H100, "NVIDIA-A100-SXM4-80GB")]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_OPS)
def test_running_totals_equal_the_holds_kept(
    ops: list[tuple[str, str, str, int, Any]],
) -> None:
    """Whatever mix of holds, releases, replacements, caps and expiry: each namespace's
    running total is exactly the sum of the holds it still has, and the caps hold."""
    r = Reservations(ttl=10, max_holds=4, max_per_namespace=2)
    now = 1000.0
    for op, namespace, name, gpus, reach in ops:
        if op == "hold":
            r.hold(pod(name, gpus, namespace, reach=reach), now=now)
            assert pod(name, gpus, namespace, reach=reach) in r.held(namespace, now)
        elif op == "release":
            r.release_for(pod(name + "x1" if name.endswith("-") else name, gpus, namespace))
        else:
            now += 4
        r.expire(now)
        assert r.count <= 4
        for ns in ("ml", "web", "ci"):
            held = r.held(ns, now)
            assert len(held) <= 2
            by_resource: dict[str, Fraction] = {}
            by_product: dict[tuple[str, str], Fraction] = {}
            for p in held:
                by_resource[GPU] = by_resource.get(GPU, Fraction(0)) + p.gpus[GPU]
                for product in p.products:
                    key = (GPU, product)
                    by_product[key] = by_product.get(key, Fraction(0)) + p.gpus[GPU]
            total = r.usage(ns)
            if not held:
                assert total is None
            else:
                assert total is not None
                assert (total.by_resource, total.by_product) == (by_resource, by_product)


class QuotaSnapshot(Snapshot):
    """The same, in a namespace whose ResourceQuota caps requests.nvidia.com/gpu."""

    def facts_for(self, namespace: str) -> Facts:
        facts = super().facts_for(namespace)
        quota = Quota(namespace, "gpu-quota", {f"requests.{GPU}": Fraction(8)}, {})
        return dataclasses.replace(facts, quotas=(quota,))


def test_holds_add_nothing_to_a_resource_a_resource_quota_caps() -> None:
    """The apiserver counts that resource exactly, across every replica: a hold there could
    only let a forged review make a real pod's budget look full."""
    r = Reservations(ttl=30)
    r.hold(pod("forged", 4, product=H100))
    facts = ReservingFacts(QuotaSnapshot(), r).facts_for("ml")
    assert facts.usage.by_resource[GPU] == 3  # the watch's count only
    assert facts.usage.by_product[(GPU, H100)] == 7  # a per-product cap is the webhook's own
    assert facts.unheld is not None and facts.unheld.by_resource == {GPU: 4}  # kept aside
    assert ReservingFacts(Snapshot(), r).facts_for("ml").usage.by_resource[GPU] == 7


# ---- the settle time: a current watch that did not show the pod ends its hold early ------


def test_with_a_current_watch_a_hold_ends_at_its_settle_time_unmatched() -> None:
    r = Reservations(ttl=30, settle=5)
    r.watching = lambda: True
    r.hold(pod("ghost", 4), now=100.0)
    assert r.expire(now=104.9) == 0 and held_gpus(r) == 4
    assert r.expire(now=105.0) == 1 and held_gpus(r) == 0
    assert r.unmatched == 1
    assert r.take_unmatched() == [("ml", "ghost")]
    assert r.take_unmatched() == []  # named once


def test_while_the_watch_is_not_current_a_hold_keeps_its_full_period() -> None:
    current = False
    r = Reservations(ttl=30, settle=5)
    r.watching = lambda: current
    r.hold(pod("a", 2), now=100.0)
    assert r.expire(now=120.0) == 0 and held_gpus(r) == 2  # the pod may be in the gap
    current = True  # the watch is back and in step: it had its chance
    assert r.expire(now=120.0) == 1 and r.unmatched == 1


def test_a_hold_the_watch_released_never_counts_as_unmatched() -> None:
    r = Reservations(ttl=30, settle=5)
    r.watching = lambda: True
    r.hold(pod("real", 2), now=100.0)
    r.release_for(pod("real", 2))
    assert r.expire(now=200.0) == 0
    assert (r.unmatched, r.take_unmatched()) == (0, [])


def test_without_a_watch_holds_last_their_period_and_nothing_is_called_unmatched() -> None:
    r = Reservations(ttl=30, settle=5)  # from a snapshot: no watch will ever show a pod
    r.hold(pod("a", 2), now=100.0)
    assert r.expire(now=129.0) == 0
    assert r.expire(now=130.0) == 1
    assert (r.unmatched, r.take_unmatched()) == (0, [])


def test_the_settle_time_never_outlasts_the_hold_period() -> None:
    r = Reservations(ttl=3, settle=10)
    r.watching = lambda: False
    r.hold(pod("a"), now=0.0)
    assert r.expire(now=3.0) == 1


def test_a_flood_of_unmatched_holds_names_a_bounded_few_and_counts_them_all() -> None:
    r = Reservations(ttl=30, settle=1)
    r.watching = lambda: True
    for i in range(500):
        r.hold(pod(f"forged-{i}", namespace=f"ns-{i}"), now=0.0)
    assert r.expire(now=1.0) == 500
    assert r.unmatched == 500
    assert len(r.take_unmatched()) == reservations_module._RECENT


def test_a_relist_releases_the_holds_of_the_pods_it_shows() -> None:
    r = Reservations(ttl=30)
    r.hold(pod("made-while-down", 2), now=0.0)
    r.hold(pod("train-", 1), now=0.0)
    r.hold(pod("never-made", 1), now=0.0)
    r.release_listed([pod("made-while-down", 2), pod("train-abc12", 1), pod("other", 1)])
    assert [p.name for p in r.held("ml", now=1.0)] == ["never-made"]
