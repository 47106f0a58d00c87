"""ResourceQuota scopes: a scoped quota counts, and refuses, only the pods its scopes match, as
the apiserver's quota evaluator decides it (PriorityClass In/NotIn/Exists/DoesNotExist,
Terminating/NotTerminating, BestEffort/NotBestEffort, CrossNamespacePodAffinity); it never
keeps a budget, so the budget's holds count beside it."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.compiled import compile_rules
from webhook.engine.decision import Decision
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts import objects
from webhook.facts.quotascopes import ScopeTerm, pod_matches, scope_terms
from webhook.facts.reservations import Reservations, ReservingFacts, natively_capped
from webhook.facts.snapshotfile import SnapshotError, load_snapshot
from webhook.ruleset.files import load_rules
from webhook.selectors import LabelSelector

GPU = "nvidia.com/gpu"


def spec(**fields: Any) -> dict[str, Any]:
    """A pod spec with one GPU container (no CPU or memory unless `resources` says)."""
    resources = fields.pop("resources", {"limits": {GPU: "1"}})
    return {"containers": [{"name": "c", "image": "x", "resources": resources}], **fields}


def term(scope: str, operator: str = "Exists", *values: str) -> ScopeTerm:
    return ScopeTerm(scope, operator, tuple(values))


# ---- which pods a scope matches: podMatchesScopeFunc ------------------------------------

CROSS_NAMESPACE = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "zone", "namespaceSelector": {}, "labelSelector": {}}
        ]
    }
}
SAME_NAMESPACE = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {}}}
        ]
    }
}
ANTI_CROSS = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "zone", "namespaces": ["other"]}}
        ]
    }
}


@pytest.mark.parametrize(
    ("terms", "pod", "matched"),
    [
        ((), spec(), True),  # no scope: every pod
        ((term("Terminating"),), spec(activeDeadlineSeconds=600), True),
        ((term("Terminating"),), spec(activeDeadlineSeconds=0), True),
        ((term("Terminating"),), spec(), False),
        ((term("NotTerminating"),), spec(), True),
        ((term("NotTerminating"),), spec(activeDeadlineSeconds=600), False),
        # QoS reads CPU and memory only: GPUs alone are BestEffort
        ((term("BestEffort"),), spec(), True),
        ((term("BestEffort"),), spec(resources={"requests": {"memory": "1Gi"}}), False),
        ((term("BestEffort"),), spec(resources={"limits": {"cpu": "0", GPU: "1"}}), True),
        ((term("NotBestEffort"),), spec(resources={"limits": {"cpu": "2", GPU: "1"}}), True),
        ((term("NotBestEffort"),), spec(), False),
        (
            (term("NotBestEffort"),),
            {**spec(), "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1"}}}]},
            True,
        ),
        # pod-level resources, when given, decide QoS alone
        ((term("BestEffort"),), spec(resources={"limits": {"cpu": "1"}}) | {"resources": {}}, True),
        ((term("NotBestEffort"),), spec(resources={"requests": {"memory": "1Gi"}}), True),
        ((term("NotBestEffort"),), spec() | {"resources": {"limits": {"memory": "8Gi"}}}, True),
        ((term("PriorityClass"),), spec(priorityClassName="high"), True),
        ((term("PriorityClass"),), spec(), False),
        ((term("PriorityClass", "In", "high", "mid"),), spec(priorityClassName="mid"), True),
        ((term("PriorityClass", "In", "high"),), spec(priorityClassName="low"), False),
        ((term("PriorityClass", "In", "high"),), spec(), False),
        ((term("PriorityClass", "NotIn", "high"),), spec(priorityClassName="low"), True),
        ((term("PriorityClass", "NotIn", "high"),), spec(), True),  # label-selector semantics
        ((term("PriorityClass", "DoesNotExist"),), spec(), True),
        ((term("PriorityClass", "DoesNotExist"),), spec(priorityClassName="low"), False),
        ((term("CrossNamespacePodAffinity"),), spec(affinity=CROSS_NAMESPACE), True),
        ((term("CrossNamespacePodAffinity"),), spec(affinity=ANTI_CROSS), True),
        ((term("CrossNamespacePodAffinity"),), spec(affinity=SAME_NAMESPACE), False),
        ((term("CrossNamespacePodAffinity"),), spec(), False),
        # every scope must match
        ((term("PriorityClass"), term("Terminating")), spec(priorityClassName="a"), False),
        (
            (term("PriorityClass"), term("Terminating")),
            spec(priorityClassName="a", activeDeadlineSeconds=1),
            True,
        ),
        ((term("VolumeAttributesClass"),), spec(), False),  # not a pod scope: matches no pod
        ((term("SomethingNew"),), spec(), False),
    ],
)
def test_a_scope_matches_the_pods_the_apiserver_counts(
    terms: tuple[ScopeTerm, ...], pod: dict[str, Any], matched: bool
) -> None:
    assert pod_matches(terms, pod) is matched


def test_a_pod_naming_no_class_is_judged_with_the_global_default_class() -> None:
    """The Priority admission plugin sets the global default class before quota admission."""
    batch = (term("PriorityClass", "In", "batch"),)
    assert pod_matches(batch, spec(), default_class="batch")
    assert not pod_matches(batch, spec(priorityClassName="high"), default_class="batch")


_CLASSES = st.sampled_from(["", "high", "low", "mid", "system-node-critical"])
_EXPRESSIONS = st.one_of(
    st.tuples(st.sampled_from(["In", "NotIn"]), st.lists(_CLASSES.filter(bool), min_size=1)),
    st.tuples(st.sampled_from(["Exists", "DoesNotExist"]), st.just([])),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_EXPRESSIONS, max_size=3), _CLASSES)
def test_priority_class_expressions_read_as_a_label_selector_on_the_class(
    expressions: list[tuple[str, list[str]]], name: str
) -> None:
    """The apiserver turns each expression into a label selector over {PriorityClass: name}
    (no label at all when the pod names no class) and ANDs them."""
    terms = tuple(term("PriorityClass", op, *values) for op, values in expressions)
    selector = LabelSelector.model_validate(
        {
            "matchExpressions": [
                {"key": "PriorityClass", "operator": op, "values": values}
                for op, values in expressions
            ]
        }
    )
    labels = {"PriorityClass": name} if name else {}
    assert pod_matches(terms, spec(priorityClassName=name)) is selector.matches(labels)


# ---- reading scopes: the API's objects and the snapshot file ----------------------------


def test_the_live_cache_reads_scopes_and_the_scope_selector() -> None:
    quota = objects.quota(
        {
            "metadata": {"namespace": "ml", "name": "q"},
            "spec": {
                "hard": {f"requests.{GPU}": "4"},
                "scopes": ["NotTerminating"],
                "scopeSelector": {
                    "matchExpressions": [
                        {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
                    ]
                },
            },
            "status": {"hard": {f"requests.{GPU}": "4"}, "used": {f"requests.{GPU}": "1"}},
        }
    )
    assert quota.scopes == (term("NotTerminating"), term("PriorityClass", "In", "high"))
    assert objects.quota({"metadata": {"name": "plain"}, "spec": {}}).scopes == ()


def test_a_scope_the_webhook_cannot_read_matches_no_pod() -> None:
    """Stored objects are valid; whatever else arrives is read as the apiserver would match
    it: a scope it does not know matches nothing."""
    odd = scope_terms({"scopes": [7, "Terminating"], "scopeSelector": {"matchExpressions": [1]}})
    assert not pod_matches(odd, spec(activeDeadlineSeconds=5))
    assert scope_terms({"scopes": "Terminating"}) == (term("?"),)


def snapshot_with(tmp_path: Path, quota: dict[str, Any]) -> Path:
    path = tmp_path / "cluster.yaml"
    base = {"namespace": "ml", "name": "q", "hard": {f"requests.{GPU}": "4"}}
    doc = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "resourceQuotas": [{**base, **quota}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_snapshot_quota_keeps_its_scopes(tmp_path: Path) -> None:
    path = snapshot_with(
        tmp_path,
        {
            "scopes": ["Terminating"],
            "scopeSelector": {
                "matchExpressions": [
                    {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["low"]}
                ]
            },
        },
    )
    (quota,) = load_snapshot(path).facts_for("ml").quotas
    assert quota.scopes == (term("Terminating"), term("PriorityClass", "NotIn", "low"))


@pytest.mark.parametrize(
    ("quota", "problem"),
    [
        ({"scopes": ["Sometimes"]}, "scopes.0"),
        ({"scopes": ["Terminating", "NotTerminating"]}, "Terminating and NotTerminating"),
        ({"scopes": ["BestEffort", "NotBestEffort"]}, "BestEffort and NotBestEffort"),
        (
            {
                "scopeSelector": {
                    "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]
                }
            },
            "needs at least one value",
        ),
        (
            {
                "scopeSelector": {
                    "matchExpressions": [
                        {"scopeName": "PriorityClass", "operator": "Exists", "values": ["a"]}
                    ]
                }
            },
            "takes no values",
        ),
        (
            {
                "scopeSelector": {
                    "matchExpressions": [
                        {"scopeName": "Terminating", "operator": "In", "values": ["a"]}
                    ]
                }
            },
            "only Exists",
        ),
        (
            {
                "scopeSelector": {
                    "matchExpressions": [{"scopeName": "PriorityClass", "operator": "Gt"}]
                }
            },
            "operator",
        ),
    ],
)
def test_a_snapshot_scope_the_apiserver_would_refuse_is_an_error(
    tmp_path: Path, quota: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SnapshotError, match="resourceQuotas") as err:
        load_snapshot(snapshot_with(tmp_path, quota))
    assert problem in str(err.value)


_NAMES = st.sampled_from(
    [
        "PriorityClass",
        "Terminating",
        "NotTerminating",
        "BestEffort",
        "NotBestEffort",
        "CrossNamespacePodAffinity",
        "VolumeAttributesClass",
        "",
        "x",
    ]
)
_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4) | _NAMES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_SELECTORS = st.fixed_dictionaries(
    {},
    optional={
        "scopes": st.lists(_NAMES, max_size=3) | _ANY,
        "scopeSelector": st.fixed_dictionaries(
            {},
            optional={
                "matchExpressions": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "scopeName": _NAMES | _ANY,
                            "operator": st.sampled_from(
                                ["In", "NotIn", "Exists", "DoesNotExist", "Gt"]
                            )
                            | _ANY,
                            "values": st.lists(_CLASSES, max_size=2) | _ANY,
                        },
                    ),
                    max_size=3,
                )
                | _ANY
            },
        )
        | _ANY,
    },
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_SELECTORS, _CLASSES, st.booleans())
def test_any_scope_input_is_read_or_refused_in_one_line_never_crashes(
    tmp_path_factory: pytest.TempPathFactory,
    given_scopes: dict[str, Any],
    name: str,
    deadline: bool,
) -> None:
    """Scopes from a snapshot file (CI's input): either the snapshot loads and every pod is
    judged, or it is refused with a SnapshotError naming the field; never a traceback. The
    live cache reads the same shapes without refusing any."""
    pod = spec(priorityClassName=name, **({"activeDeadlineSeconds": 5} if deadline else {}))
    pod_matches(scope_terms(given_scopes), pod)  # the live reading: never raises
    path = snapshot_with(tmp_path_factory.mktemp("s"), given_scopes)
    try:
        (quota,) = load_snapshot(path).facts_for("ml").quotas
    except SnapshotError as exc:
        assert "\n" not in str(exc) and "resourceQuotas.0" in str(exc)
        return
    pod_matches(quota.scopes, pod)
    assert all(t.scope in _KNOWN and t.operator in _OPERATORS for t in quota.scopes)


_KNOWN = {
    "VolumeAttributesClass",
    "PriorityClass",
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "CrossNamespacePodAffinity",
}
_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}


# ---- what the webhook does with them ----------------------------------------------------


def test_holds_count_for_a_budget_beside_a_scoped_quota() -> None:
    """A scoped quota counts some pods only: it keeps no budget, so it leaves every hold in
    the usage (an unscoped one takes them out: the apiserver counts them exactly)."""
    from webhook.facts.model import Quota

    scoped = Quota("ml", "high", {f"requests.{GPU}": Fraction(8)}, {}, (term("PriorityClass"),))
    plain = Quota("ml", "all", {f"requests.{GPU}": Fraction(8)}, {})
    assert natively_capped((scoped,)) == frozenset()
    assert natively_capped((scoped, plain)) == {GPU}


BUDGET = {
    "rules": {
        "gpu-quota": {"budgets": [{"name": "ml", "namespaces": ["ml-team"], "limits": {GPU: 8}}]}
    }
}


def pod(name: str, gpus: int, priority_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-team"},
        "spec": {
            **spec(resources={"limits": {GPU: str(gpus)}}),
            "priorityClassName": priority_class,
        },
    }


def burst(tmp_path: Path, quota: dict[str, Any]) -> list[Decision]:
    """Three 4-GPU pods of class `low` at once against a budget of 8 with 2 in use, beside a
    ResourceQuota of 8 on `requests.nvidia.com/gpu`."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "budget.yaml").write_text(yaml.safe_dump(BUDGET))
    compiled = compile_rules(load_rules(tmp_path / "rules"))
    snapshot = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {"ml-team": {"labels": {}}},
        "priorityClasses": [{"name": "high", "value": 1000}, {"name": "low", "value": 10}],
        "resourceQuotas": [
            {
                "namespace": "ml-team",
                "name": "q",
                "hard": {f"requests.{GPU}": "8"},
                "used": {f"requests.{GPU}": "2"},
                **quota,
            }
        ],
        "pods": [
            {"namespace": "ml-team", "name": "running", "gpus": {GPU: 2}, "priorityClass": "low"}
        ],
    }
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(snapshot))
    source = ReservingFacts(load_snapshot(tmp_path / "cluster.yaml"), Reservations(ttl=30))
    out = []
    for i in range(3):
        subject = subject_for(pod(f"low-{i}", 4, "low"), namespace="ml-team")
        decision = evaluate(subject, compiled, source.facts_for("ml-team"), stage=Stage.VALIDATE)
        if decision.hold is not None:
            source.reservations.hold(decision.hold)
        out.append(decision)
    return out


def test_a_quota_scoped_to_another_class_keeps_no_budget_so_a_burst_is_held_to_it(
    tmp_path: Path,
) -> None:
    high_only = {
        "scopeSelector": {
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
            ]
        }
    }
    decisions = burst(tmp_path, high_only)
    assert [d.allowed for d in decisions] == [True, False, False]  # 2 + 4 fits, 2 + 8 not
    assert "uses 6 of 8" in decisions[1].denials[0].summary


def test_an_unscoped_quota_keeps_the_budget_and_the_apiserver_holds_the_line(
    tmp_path: Path,
) -> None:
    """The contrast: an unscoped quota of 8 counts every pod transactionally, so the webhook
    leaves the burst to it (its `used` is what the apiserver has admitted so far)."""
    decisions = burst(tmp_path, {})
    assert all(d.allowed for d in decisions)


def test_rules_check_does_not_take_a_scoped_quota_for_one_that_keeps_a_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.cli import main

    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "budget.yaml").write_text(yaml.safe_dump(BUDGET))
    snapshot = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {"ml-team": {"labels": {}}},
        "resourceQuotas": [
            {"namespace": "ml-team", "name": "high-only", "hard": {f"requests.{GPU}": "8"},
             "scopes": ["PriorityClass"]},
        ],
    }  # fmt: skip
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    assert main(["rules", "check", str(tmp_path / "rules"), "--cluster-snapshot", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"no ResourceQuota in ml-team caps requests.{GPU} yet" in out
