"""`audit --cluster`: the same audit over what a live cluster runs, read once through the
kubeconfig. Controllers are audited through their pod templates; pods only when no controller
owns them (a ReplicaSet's pods would repeat its Deployment's findings a hundred times)."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from webhook.audit.manifests import Document
from webhook.audit.progress import Progress
from webhook.audit.run import AuditResult, Summary
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.podviews import BUILTIN_GROUPS
from webhook.engine.workloads import DEFAULT_TABLE, WorkloadTable
from webhook.facts.live import LiveCache
from webhook.facts.model import FactsSource
from webhook.facts.watched import pages
from webhook.quantity import Amount

__all__ = [
    "MAX_RESULTS",
    "WORKLOADS",
    "NamespaceSummary",
    "bounded",
    "list_workloads",
    "one_shot_facts",
    "print_summary",
    "summarize",
    "write_reports",
]


# (API class, list-all method, list-namespaced method, apiVersion, kind)
def _w(api: str, resource: str, api_version: str, kind: str) -> tuple[str, str, str, str, str]:
    return (
        api,
        f"list_{resource}_for_all_namespaces",
        f"list_namespaced_{resource}",
        api_version,
        kind,
    )


WORKLOADS = (
    _w("AppsV1Api", "deployment", "apps/v1", "Deployment"),
    _w("AppsV1Api", "stateful_set", "apps/v1", "StatefulSet"),
    _w("AppsV1Api", "daemon_set", "apps/v1", "DaemonSet"),
    _w("AppsV1Api", "replica_set", "apps/v1", "ReplicaSet"),
    _w("BatchV1Api", "cron_job", "batch/v1", "CronJob"),
    _w("BatchV1Api", "job", "batch/v1", "Job"),
    _w("CoreV1Api", "pod", "v1", "Pod"),
)


def _controlled(obj: dict[str, Any]) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("controller") for r in refs)


def list_workloads(
    api_client: Any,
    *,
    namespace: str | None = None,
    page_size: int = 500,
    progress: Progress | None = None,
    table: WorkloadTable = DEFAULT_TABLE,
) -> Iterator[Document]:
    """Top-level workloads, page by page: memory stays bounded by the page size. Built-in
    kinds first, then every CRD kind of the workload table that the cluster serves. Each
    object listed counts as `listed` on `progress`."""
    from kubernetes import client

    for api_name, all_ns, one_ns, api_version, kind in WORKLOADS:
        api = getattr(client, api_name)(api_client)
        fn = getattr(api, one_ns if namespace else all_ns)
        kwargs: dict[str, Any] = {"namespace": namespace} if namespace else {}
        for items, _ in pages(fn, page_size, **kwargs):
            for obj in items:
                if progress is not None:
                    progress.bump("listed")
                if _controlled(obj):
                    continue  # judged through the object that owns it
                obj.setdefault("apiVersion", api_version)
                obj.setdefault("kind", kind)
                meta = obj.get("metadata") or {}
                yield Document(f"{kind}/{meta.get('namespace', '')}/{meta.get('name', '')}", obj)
    for kind, items in _custom_workloads(api_client, table, namespace, page_size):
        for obj in items:
            if progress is not None:
                progress.bump("listed")
            if _controlled(obj):
                continue  # a RayCluster owned by a RayService, a JobSet owned by a TrainJob
            meta = obj.get("metadata") or {}
            yield Document(f"{kind}/{meta.get('namespace', '')}/{meta.get('name', '')}", obj)


def _custom_workloads(
    api_client: Any, table: WorkloadTable, namespace: str | None, page_size: int
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Pages of every CRD kind the workload table knows; a kind not installed is skipped.

    Its versions are tried in the order declared until one is served (mpi-operator v2 serves
    MPIJob only as v2beta1): the apiserver converts between the versions it serves, so one is
    enough. Cluster-scoped kinds belong to no namespace: read only when the audit is not
    limited to one.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = client.CustomObjectsApi(api_client)
    for w in table.kinds:
        if w.group in BUILTIN_GROUPS or (namespace and w.cluster_scoped):
            continue
        d = w.declared
        for version in d.versions:
            args: dict[str, Any] = {"group": d.group, "version": version, "plural": d.resource}
            if namespace:
                fn: Any = api.list_namespaced_custom_object
                args["namespace"] = namespace
            else:
                fn = api.list_cluster_custom_object
            listed = False
            try:
                for items, _ in pages(fn, page_size, **args):
                    listed = True
                    for obj in items:
                        obj.setdefault("apiVersion", f"{d.group}/{version}")
                        obj.setdefault("kind", d.kind)
                    yield d.kind, items
            except ApiException as exc:
                # 404 on the first page: this version, or the whole CRD, is not served here.
                if exc.status == 404 and not listed:
                    continue
                raise
            break


@dataclass
class NamespaceSummary:
    """GPUs requested by running GPU pods, against the namespace's quota; the namespace's
    objects counted as every audit output counts them (`run.Summary`)."""

    gpus: dict[str, Amount] = field(default_factory=dict)
    by_product: dict[str, Amount] = field(default_factory=dict)
    quota: dict[str, Amount] = field(default_factory=dict)
    counts: Summary = field(default_factory=Summary)


def summarize(
    results: list[AuditResult], source: FactsSource, rules: CompiledRuleSet
) -> dict[str, NamespaceSummary]:
    out: dict[str, NamespaceSummary] = defaultdict(NamespaceSummary)
    for r in results:
        out[r.namespace].counts.add(r)
    is_gpu = rules.base.is_gpu
    for ns in list(out):
        facts = source.facts_for(ns)
        usage = facts.usage
        s = out[ns]
        s.gpus = {k: v for k, v in usage.by_resource.items() if is_gpu(k)}
        s.by_product = {f"{k}@{p}": v for (k, p), v in usage.by_product.items() if is_gpu(k)}
        for q in facts.quotas:
            for key, hard in q.hard.items():
                if is_gpu(key.partition(".")[2]):
                    s.quota[key] = hard
    return dict(out)


def print_summary(summary: dict[str, NamespaceSummary], out: TextIO = sys.stdout) -> None:
    def show(values: dict[str, Amount]) -> str:
        return (
            ", ".join(
                f"{k}={int(v) if v.denominator == 1 else float(v)}"
                for k, v in sorted(values.items())
            )
            or "-"
        )

    print("\nGPU use by namespace (running pods) against quota:", file=out)
    for ns, s in sorted(summary.items()):
        name = ns or "(cluster-scoped)"
        print(f"  {name}: in use {show(s.gpus)}; quota {show(s.quota)}", file=out)
        if s.by_product:
            print(f"    by product: {show(s.by_product)}", file=out)
        print(f"    {s.counts.describe()}", file=out)


MAX_RESULTS = 1000  # per report: etcd refuses objects past ~1.5 MB; failures are kept first
_ORDER = {"fail": 0, "warn": 1, "error": 2, "skip": 3, "pass": 4}


def bounded(report: dict[str, Any], limit: int = MAX_RESULTS) -> dict[str, Any]:
    """A report small enough to store: failures and warnings first, passes dropped first.

    The summary keeps counting everything, so dashboards still show the true totals.
    """
    results = report["results"]
    if len(results) <= limit:
        return report
    kept = sorted(results, key=lambda r: _ORDER.get(r["result"], 5))[:limit]
    annotations = {
        **report["metadata"].get("annotations", {}),
        "gpu-admission.io/results-dropped": str(len(results) - limit),
    }
    meta = {**report["metadata"], "annotations": annotations}
    return {**report, "metadata": meta, "results": kept}


def write_reports(api_client: Any, reports: list[dict[str, Any]]) -> int:
    """Create or replace one PolicyReport per namespace; returns how many were written."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = client.CustomObjectsApi(api_client)
    group, version, plural = "wgpolicyk8s.io", "v1alpha2", "policyreports"
    for report in reports:
        body = bounded(report)
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            api.create_namespaced_custom_object(group, version, ns, plural, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current: Any = api.get_namespaced_custom_object(group, version, ns, plural, name)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            api.replace_namespaced_custom_object(group, version, ns, plural, name, body)
    return len(reports)


def one_shot_facts(api_client: Any) -> LiveCache:
    """Cluster facts from one paged list of each kind, no watch: the live audit's snapshot."""
    cache = LiveCache(api_client)
    cache.list_once()
    return cache
