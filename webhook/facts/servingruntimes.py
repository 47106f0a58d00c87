"""KServe serving runtimes as facts: whether an InferenceService's pods get /dev/shm from them.

KServe builds a predictor's pod by merging the InferenceService's `spec.predictor` over the
ServingRuntime or ClusterServingRuntime it uses (a strategic merge): pod volumes by name, the
model container over the runtime's `kserve-container`, and that container's volumeMounts by
mountPath. A /dev/shm volume we add to the predictor therefore *replaces* the runtime's (its
16Gi becomes our 8Gi), so the /dev/shm rule needs to know which runtimes bring one.

Each runtime is reduced to a `ServingRuntime` (names, supported formats, protocol versions,
which of its containers mount /dev/shm, its volume names): a few hundred bytes, never the
object. `RuntimeStore` holds them for the live cache (its writers hold the cache's lock; a
reader takes whole values that are never edited once handed out) and for a snapshot file.
Both kinds are optional: a 404 on a list means KServe is not installed (known, and none);
a 403 means we may not read them (unknown: the rule then leaves InferenceServices alone).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from webhook.facts.model import ModelFormat, ServingRuntime, ServingRuntimes

__all__ = [
    "CLUSTER_KIND",
    "KINDS",
    "NAMESPACED_KIND",
    "RuntimeStore",
    "reduce",
    "serving_runtime",
]

log = logging.getLogger("gpu-admission.cache")

NAMESPACED_KIND = "servingruntimes"  # serving.kserve.io/v1alpha1, the resources' plurals
CLUSTER_KIND = "clusterservingruntimes"
KINDS = (NAMESPACED_KIND, CLUSTER_KIND)
SHM_PATH = "/dev/shm"

_NONE: Mapping[str, ServingRuntime] = MappingProxyType({})


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _formats(raw: Any) -> tuple[ModelFormat, ...]:
    out = []
    for entry in _list(raw):
        entry = _dict(entry)
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        version = entry.get("version")
        priority = entry.get("priority")
        out.append(
            ModelFormat(
                name=name,
                version=version if isinstance(version, str) else None,
                auto_select=entry.get("autoSelect") is True,
                priority=(
                    priority
                    if isinstance(priority, int) and not isinstance(priority, bool)
                    else None
                ),
            )
        )
    return tuple(out)


def _pod_part(spec: dict[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
    """(containers that mount something at /dev/shm, pod volume names) of a runtime pod spec."""
    shm = set()
    for c in _list(spec.get("containers")):
        c = _dict(c)
        for m in _list(c.get("volumeMounts")):
            path = _dict(m).get("mountPath")
            if isinstance(path, str) and path.rstrip("/") == SHM_PATH:
                shm.add(str(c.get("name") or ""))
    volumes = {
        v["name"] for v in _list(spec.get("volumes")) if isinstance(_dict(v).get("name"), str)
    }
    return frozenset(shm), frozenset(volumes)


def serving_runtime(obj: Mapping[str, Any], *, cluster: bool) -> ServingRuntime:
    """A ServingRuntime or ClusterServingRuntime as the API returns it, reduced. Fields of a
    wrong type read as absent: the object passed KServe's schema, so that is only a forgery."""
    spec = _dict(obj.get("spec"))
    shm, volumes = _pod_part(spec)
    worker = spec.get("workerSpec")
    worker_shm, worker_volumes = _pod_part(_dict(worker))
    return ServingRuntime(
        name=str(_dict(obj.get("metadata")).get("name") or ""),
        cluster=cluster,
        formats=_formats(spec.get("supportedModelFormats")),
        protocols=tuple(p for p in _list(spec.get("protocolVersions")) if isinstance(p, str)),
        disabled=spec.get("disabled") is True,
        multi_model=spec.get("multiModel") is True,
        multi_node=worker is not None,
        shm_containers=shm,
        volumes=volumes,
        worker_shm_containers=worker_shm,
        worker_volumes=worker_volumes,
    )


def reduce(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, ServingRuntime]:
    """(namespace, name, runtime) of one object of `kind` (NAMESPACED_KIND or CLUSTER_KIND)."""
    namespace = str(_dict(obj.get("metadata")).get("namespace") or "")
    runtime = serving_runtime(obj, cluster=kind == CLUSTER_KIND)
    return namespace, runtime.name, runtime


class RuntimeStore:
    """Runtimes by namespace and the cluster's, and which of the two kinds are known.

    Not locked itself: the live cache calls the writers under its own lock. Every write
    replaces the namespace's map (or the cluster map) whole, so a `ServingRuntimes` handed to
    a request never changes under it.
    """

    __slots__ = ("_cluster", "_known", "_namespaced")

    def __init__(self) -> None:
        self._namespaced: dict[str, Mapping[str, ServingRuntime]] = {}
        self._cluster: Mapping[str, ServingRuntime] = _NONE
        self._known: set[str] = set()  # kinds listed, or not installed (404)

    @classmethod
    def from_objects(
        cls, namespaced: Iterable[Mapping[str, Any]], cluster: Iterable[Mapping[str, Any]]
    ) -> RuntimeStore:
        """Both kinds known, from whole objects (a snapshot file's sections)."""
        store = cls()
        for kind, objects in ((NAMESPACED_KIND, namespaced), (CLUSTER_KIND, cluster)):
            store.replace(kind, [reduce(kind, o) for o in objects])
        return store

    def replace(self, kind: str, items: Iterable[tuple[str, str, ServingRuntime]]) -> None:
        """A whole list of one kind (a relist), as `reduce` gives them: all there is."""
        if kind == CLUSTER_KIND:
            self._cluster = MappingProxyType({rt.name: rt for _, _, rt in items})
        else:
            grouped: dict[str, dict[str, ServingRuntime]] = {}
            for namespace, _, runtime in items:
                grouped.setdefault(namespace, {})[runtime.name] = runtime
            self._namespaced = {ns: MappingProxyType(rs) for ns, rs in grouped.items()}
        self._known.add(kind)

    def put(self, kind: str, namespace: str, name: str, value: ServingRuntime | None) -> None:
        """One watch event: the runtime as it is now, or None when it was deleted."""
        runtime = value
        cluster = kind == CLUSTER_KIND
        runtimes = dict(self._cluster if cluster else self._namespaced.get(namespace, _NONE))
        if runtime is None:
            runtimes.pop(name, None)
        else:
            runtimes[name] = runtime
        if cluster:
            self._cluster = MappingProxyType(runtimes)
        elif runtimes:
            self._namespaced[namespace] = MappingProxyType(runtimes)
        else:
            self._namespaced.pop(namespace, None)

    def not_served(self, kind: str, status: int) -> bool:
        """Whether a failed list is an answer: 404 (KServe not installed: known, none) or 403
        (we may not read them: unknown, warned). Anything else is an error to retry."""
        if status not in (404, 403):
            return False
        if kind == CLUSTER_KIND:
            self._cluster = _NONE
        else:
            self._namespaced = {}
        if status == 404:
            self._known.add(kind)
            log.info("%s: not installed (404); InferenceServices use no runtime", kind)
        else:
            self._known.discard(kind)
            log.warning(
                "%s: not allowed to list them (403); an InferenceService's runtime is unknown, "
                "so its predictor gets no /dev/shm (and a warning)",
                kind,
            )
        return True

    def facts_for(self, namespace: str) -> ServingRuntimes | None:
        """The runtimes a predictor in `namespace` may use; None until both kinds are known
        (a name is looked up in the namespace first, then among the cluster's)."""
        if len(self._known) < 2:
            return None
        return ServingRuntimes(self._namespaced.get(namespace, _NONE), self._cluster)
