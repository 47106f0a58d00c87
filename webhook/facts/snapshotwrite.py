"""A live cluster's facts written as a snapshot file (`gpu-admission snapshot`).

The file is the one `--cluster-snapshot` reads (`webhook.facts.snapshotfile`), holding what the
live cache would hold of the same cluster: nodes, quotas, pods and ConfigMaps as the cache
reduces them (`webhook.facts.objects`), the optional kinds (autoscalers, DRA, KServe, webhook
configurations) whole, less the metadata that changes without the object changing. Each
section is one row of `SECTIONS`: the kind it lists, how one object becomes one entry, and
what a kind the cluster does not serve (404) or will not show (403) leaves in the file, so a
new section is one row more.

Secrets are never read: the section is left out, which reads as "unknown", as the live cache
(which never watches them) has it. The output is sorted and free of timestamps, so the same
cluster gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal

import yaml

from webhook.facts import dra, queues, servingruntimes, webhookconfigs
from webhook.facts.client import list_call
from webhook.facts.model import GPU_PRODUCT_LABEL
from webhook.facts.objects import config_map_keys, node, pod_summary, priority_class, quota
from webhook.facts.watched import (
    DRA_KINDS,
    KINDS,
    PROVISIONING_KINDS,
    QUEUE_KINDS,
    SERVING_KINDS,
    WEBHOOK_KINDS,
    Kind,
    pages,
)
from webhook.quantity import Amount

__all__ = ["SECTIONS", "Listed", "Section", "SnapshotReadError", "snapshot_document", "to_yaml"]

Entry = dict[str, Any]


class SnapshotReadError(RuntimeError):
    """A kind the snapshot cannot do without could not be listed; `cause` is the API error."""

    def __init__(self, section: str, cause: Exception) -> None:
        super().__init__(section)
        self.section = section
        self.cause = cause


@dataclass
class Listed:
    """What earlier sections found that later ones read: a pod's GPU product is its node's."""

    products: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # sections left out, and why
    # Who runs where (every pod, with its service account) is written only for the whole
    # cluster: from a few namespaces, `rules check` would take the others as not existing.
    census: bool = True


@dataclass(frozen=True)
class Section:
    """One section of the file: a kind listed, and each object as one entry (None: none)."""

    key: str  # the section's name in the file
    kind: Kind
    entry: Callable[[dict[str, Any], Listed], Entry | None]
    namespaced: bool = False  # `--namespace` limits it
    # What a kind the cluster does not serve (404) leaves: "empty" (known, none) or "omit"
    # (the section left out: unknown, or for the autoscalers, not installed).
    when_absent: Literal["empty", "omit"] = "empty"
    # What a 403 leaves: the sections of the same group all left out (unknown), or "fail".
    group: str = ""
    when_forbidden: Literal["omit", "fail"] = "omit"
    # Older versions of the kind, tried in turn when the cluster does not serve `kind` (404).
    older: tuple[Kind, ...] = ()


# ---- entries ------------------------------------------------------------------------------


def _quantity(value: Amount) -> int | str:
    """An amount as a quantity the reader parses back to the same value: 2, 500m, 250n."""
    if isinstance(value, int) or value.denominator == 1:
        return int(value)
    nano = value * 10**9
    if isinstance(nano, Fraction) and nano.denominator != 1:  # finer than the API stores
        return str(float(value))
    whole = int(nano)
    if whole % 10**6 == 0:
        return f"{whole // 10**6}m"
    if whole % 10**3 == 0:
        return f"{whole // 10**3}u"
    return f"{whole}n"


def _amounts(values: dict[str, Amount]) -> dict[str, int | str]:
    return {k: _quantity(v) for k, v in sorted(values.items())}


def _compact(entry: Entry) -> Entry:
    """Fields at their default (empty, False) left out: the reader fills them in."""
    return {k: v for k, v in entry.items() if v not in ({}, [], "", False, None)}


def _namespace(obj: dict[str, Any]) -> Entry:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return _compact({"labels": dict(sorted(labels.items()))})


def _node(obj: dict[str, Any], listed: Listed) -> Entry:
    n = node(obj)
    listed.products[n.name] = n.labels.get(GPU_PRODUCT_LABEL, "")
    taints = [_compact({"key": k, "value": v, "effect": e}) for k, v, e in n.taints]
    return {
        "name": n.name,
        **_compact(
            {
                "labels": dict(sorted(n.labels.items())),
                "allocatable": _amounts(dict(n.gpus)),
                "unschedulable": n.unschedulable,
                "taints": taints,
            }
        ),
    }


def _quota(obj: dict[str, Any], _: Listed) -> Entry:
    q = quota(obj)
    raw = obj.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    selector = spec.get("scopeSelector") or {}
    expressions = [
        _compact(
            {
                "scopeName": e.get("scopeName"),
                "operator": e.get("operator"),
                "values": list(e.get("values") or []),
            }
        )
        for e in selector.get("matchExpressions") or []
        if isinstance(e, dict)
    ]
    return {
        "namespace": q.namespace,
        "name": q.name,
        **_compact(
            {
                "hard": _amounts(dict(q.hard)),
                "used": _amounts(dict(q.used)),
                "scopes": list(spec.get("scopes") or []),
                "scopeSelector": {"matchExpressions": expressions} if expressions else None,
            }
        ),
    }


def _priority_class(obj: dict[str, Any], _: Listed) -> Entry:
    pc = priority_class(obj)
    return {
        "name": pc.name,
        "value": pc.value,
        "preemptionPolicy": pc.preemption_policy,
        **_compact({"globalDefault": pc.global_default}),
    }


def _pod(obj: dict[str, Any], listed: Listed) -> Entry | None:
    """A GPU pod with what it holds; for the whole cluster, every pod with its service
    account too (who runs where, which `rules check` compares the exemptions with)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    gpus = pod_summary(obj, lambda name: listed.products.get(name, ""))
    head = {"namespace": meta.get("namespace", ""), "name": meta.get("name", "")}
    if listed.census:
        head["serviceAccount"] = str(spec.get("serviceAccountName") or "default")
    if gpus is None:
        if not listed.census:
            return None
        return {**head, "phase": (obj.get("status") or {}).get("phase", "Pending")}
    return {
        **head,
        "phase": gpus.phase,
        **_compact(
            {
                "gpus": _amounts(dict(gpus.gpus)),
                "node": gpus.node,
                "product": gpus.product,
                "priorityClass": gpus.priority_class,
            }
        ),
    }


def _config_map(obj: dict[str, Any], _: Listed) -> Entry | None:
    """Only the keys `envFrom` could turn into NVIDIA_VISIBLE_DEVICES, as the cache keeps."""
    keys = config_map_keys(obj)
    if not keys:
        return None
    meta = obj.get("metadata") or {}
    return {"namespace": meta.get("namespace", ""), "name": meta.get("name", ""), "data": keys}


# Metadata that changes while the object does not: left out so the same cluster gives the
# same file (and no last-applied copy doubles each object).
_VOLATILE = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _whole(obj: dict[str, Any], _: Listed) -> Entry:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != _LAST_APPLIED}
    meta = _compact({**meta, "annotations": annotations})
    return _sorted({**obj, "metadata": meta})


def _sorted(value: Any) -> Any:
    """Mappings with their keys sorted, at every depth (lists keep their order)."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


# ---- the table ----------------------------------------------------------------------------

_CORE = {k.name: k for k in KINDS}
_OPTIONAL = {
    k.name: k for k in PROVISIONING_KINDS + DRA_KINDS + SERVING_KINDS + WEBHOOK_KINDS + QUEUE_KINDS
}


def _optional(key: str, kind: str, **how: Any) -> Section:
    return Section(key, _OPTIONAL[kind], _whole, **how)


def _kueue(key: str, plural: str, namespaced: bool = False) -> Section:
    """A Kueue kind at the newest version the cluster serves (v1beta2, else v1beta1): the
    cache names the newest `<plural>`, an older one `<plural>.<version>`."""
    older = tuple(_OPTIONAL[f"{plural}.{v}"] for v in queues.KUEUE_VERSIONS[1:])
    return Section(key, _OPTIONAL[plural], _whole, namespaced, group="queues", older=older)


SECTIONS: tuple[Section, ...] = (
    Section("nodes", _CORE["nodes"], _node, when_forbidden="fail"),
    Section("resourceQuotas", _CORE["resourcequotas"], _quota, True, when_forbidden="fail"),
    Section("priorityClasses", _CORE["priorityclasses"], _priority_class, when_forbidden="fail"),
    Section("pods", _CORE["pods"], _pod, True, when_forbidden="fail"),
    Section("configMaps", _CORE["configmaps"], _config_map, True),
    # Autoscalers: any listed says what the cluster can create, so one the cluster will not
    # show leaves them all out (unknown); one not installed is simply not there.
    *(
        _optional(key, kind, when_absent="omit", group="provisioning")
        for key, kind in (
            ("nodePools", "nodepools"),
            ("machineSets", "machinesets"),
            ("machineDeployments", "machinedeployments"),
            ("machinePools", "machinepools"),
        )
    ),
    _optional("deviceClasses", "deviceclasses"),
    _optional("resourceClaimTemplates", "resourceclaimtemplates", namespaced=True),
    _optional("resourceClaims", "resourceclaims", namespaced=True),
    _optional("resourceSlices", dra.SLICES),
    # KServe: either section makes both known, so a forbidden one leaves both out.
    _optional("servingRuntimes", servingruntimes.NAMESPACED_KIND, namespaced=True, group="serving"),
    _optional("clusterServingRuntimes", servingruntimes.CLUSTER_KIND, group="serving"),
    _optional("validatingWebhookConfigurations", webhookconfigs.KIND, when_absent="omit"),
    # Batch queues: the reader takes the four sections as known together, so a forbidden one
    # leaves them all out (unknown); a kind not installed is known and empty.
    _kueue("localQueues", queues.LOCAL, namespaced=True),
    _kueue("clusterQueues", queues.CLUSTER),
    _kueue("resourceFlavors", queues.FLAVOR),
    _optional("queues", queues.KAI, group="queues"),
)


# ---- reading the cluster ------------------------------------------------------------------


def _objects(
    api_client: Any, section: Section, namespaces: list[str] | None, page_size: int
) -> Iterable[dict[str, Any]]:
    """Every object of the section's kind, or of each namespace asked for."""
    scopes: list[str | None] = [None]
    if section.namespaced and namespaces is not None:
        scopes = list(namespaces)
    for namespace in scopes:
        fn = list_call(api_client, section.kind, namespace=namespace)
        size = min(page_size, section.kind.max_page or page_size)
        for items, _ in pages(fn, size):
            yield from items


def _key(entry: Entry) -> tuple[str, str]:
    meta = entry.get("metadata") or {}
    return (
        str(entry.get("namespace", meta.get("namespace", ""))),
        str(entry.get("name", meta.get("name", ""))),
    )


def snapshot_document(
    api_client: Any,
    *,
    namespaces: list[str] | None = None,
    page_size: int = 500,
    sections: tuple[Section, ...] = SECTIONS,
) -> tuple[dict[str, Any], list[str]]:
    """The snapshot of the cluster behind `api_client` as a document, and notes on the
    sections left out. `namespaces` (None: all) limits the namespaced sections and the
    `namespaces` map; what describes the whole cluster is always read.

    Raises `SnapshotReadError` when a kind the facts cannot do without fails to list."""
    from kubernetes.client.exceptions import ApiException

    listed = Listed(census=namespaces is None)
    doc: dict[str, Any] = {"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot"}
    try:
        found = {
            (ns.get("metadata") or {}).get("name", ""): ns
            for ns in _objects(
                api_client, Section("", _CORE["namespaces"], _whole), None, page_size
            )
        }
    except ApiException as exc:
        raise SnapshotReadError("namespaces", exc) from exc
    wanted = sorted(found) if namespaces is None else sorted(n for n in namespaces if n in found)
    listed.notes += [
        f"namespace {n}: not found" for n in sorted(set(namespaces or ()) - set(found))
    ]
    doc["namespaces"] = {n: _namespace(found[n]) for n in wanted}
    dropped: set[str] = set()
    scope = wanted if namespaces is not None else None
    for section in sections:
        try:
            entries = _entries(api_client, section, scope, page_size, listed)
        except ApiException as exc:
            if exc.status == 403 and section.when_forbidden == "omit":
                dropped.add(section.group or section.key)
                listed.notes.append(f"{section.key}: not allowed to list them (403); unknown")
                continue
            if exc.status == 404 and section.when_forbidden == "omit":
                if section.when_absent == "empty":
                    doc[section.key] = []
                continue
            raise SnapshotReadError(section.key, exc) from exc
        doc[section.key] = sorted(entries, key=_key)
    for section in sections:
        if (section.group or section.key) in dropped:
            doc.pop(section.key, None)
    return doc, listed.notes


def _entries(
    api_client: Any, section: Section, scope: list[str] | None, page_size: int, listed: Listed
) -> list[Entry]:
    """The section's entries, from the first of its kind's versions the cluster serves."""
    from kubernetes.client.exceptions import ApiException

    kinds = (section.kind, *section.older)
    for i, kind in enumerate(kinds):
        try:
            return [
                e
                for obj in _objects(api_client, replace(section, kind=kind), scope, page_size)
                if (e := section.entry(obj, listed)) is not None
            ]
        except ApiException as exc:
            if exc.status != 404 or i == len(kinds) - 1:
                raise
    raise AssertionError("unreachable: a section has at least one kind")


class _Dumper(yaml.SafeDumper):
    """Block style, long strings unfolded: one stable rendering."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


HEADER = (
    "# Cluster facts written by `gpu-admission snapshot` (docs/cluster-facts.md); read with\n"
    "# --cluster-snapshot. Secrets are never read: their section is left out (unknown).\n"
)


def to_yaml(doc: dict[str, Any]) -> str:
    """The document as the file's text: sections in table order, entries sorted."""
    body = yaml.dump(
        doc,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        width=1_000_000,
        allow_unicode=True,
    )
    return HEADER + body
