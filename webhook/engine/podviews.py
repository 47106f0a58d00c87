"""Where pod specs live inside workload objects, and typed read-only views over them.

The paths come from the workload table (`webhook.ruleset.workloads`: `spec.template.spec` for
a Deployment, `spec.jobTemplate.spec.template.spec` for a CronJob, a team's own CRDs...). Every
view carries the JSON pointer of its pod spec, so checks work relative to the pod spec and
never learn the table.

Views check the shape of exactly the fields the rules read: the review envelope is strict, the
object inside is tolerant, but a field of the wrong type becomes an `UnreadableObject` that
names it instead of a crash deep inside a rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from webhook.engine.fields import (
    UnreadableObject,
    claim_refs,
    dotted,
    list_of_mappings,
    lists_ok,
    mapping,
    maps_ok,
    pod_claims,
    pointer,
    walk,
)
from webhook.engine.turns import give_way
from webhook.engine.views import ContainerView, PodView
from webhook.engine.workloads import DEFAULT_TABLE, Factor, Workload, WorkloadTable
from webhook.podrequest import is_sidecar
from webhook.quantity import Amount, QuantityError, parse_quantity, positive
from webhook.ruleset.workloads import LIST_ITEMS, MAP_VALUES

__all__ = [
    "BUILTIN_GROUPS",
    "LWS_WORKER_INDEX",
    "ContainerView",
    "PodView",
    "UnreadableObject",
    "group_of",
    "holds_pods",
    "pod_views",
    "pointer",
]

# Kinds whose pods come from a built-in controller: the apiserver knows their schema.
BUILTIN_GROUPS = frozenset({"", "apps", "batch"})


def group_of(api_version: object) -> str:
    """The API group of an apiVersion string: "apps/v1" -> "apps", "v1" -> ""."""
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def holds_pods(group: str, kind: str, table: WorkloadTable = DEFAULT_TABLE) -> bool:
    """Whether objects of this group and kind contain pod specs the table locates."""
    return table.holds_pods(group, kind)


_NONE: tuple[dict[str, Amount], dict[str, Any]] = ({}, {})


def _asks(limits: dict[str, Amount], requests: dict[str, Amount]) -> bool:
    """Zero is not an ask: `nvidia.com/gpu: 0` is a common way to say "no GPU"."""
    return any(positive(v) for v in limits.values()) or any(positive(v) for v in requests.values())


def _gpu_quantities(
    amounts: dict[str, Any],
    cpath: str,
    section: str,
    is_gpu: Callable[[str], bool],
    key: str = "resources",
) -> tuple[dict[str, Amount], dict[str, Any]]:
    """The GPU amounts of a container's limits or requests, parsed; shared empty maps (never
    edited) when it asks none."""
    parsed: dict[str, Amount] = {}
    raw: dict[str, Any] = {}
    for name, value in amounts.items():
        if not is_gpu(name):
            continue
        try:
            parsed[name] = parse_quantity(value)
        except QuantityError as exc:
            raise UnreadableObject(
                f'{cpath}.{key}.{section}["{name}"]',
                f"{exc}; expected a Kubernetes quantity such as 1 or 2",
            ) from None
        raw[name] = value
    return (parsed, raw) if raw else _NONE


def _slots(
    spec: dict[str, Any], spec_path: str, inline: tuple[str, ...]
) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any], str, str]]:
    """(slot, container, list name, field path) for every container the pod spec holds."""
    for list_name in ("initContainers", "containers", "ephemeralContainers"):
        where = f"{spec_path}.{list_name}"
        for i, c in enumerate(list_of_mappings(spec.get(list_name), where)):
            yield (list_name, i), c, list_name, f"{where}[{i}]"
    for key in inline:
        if spec.get(key) is not None:
            yield (key,), mapping(spec[key], f"{spec_path}.{key}"), "", f"{spec_path}.{key}"


_CONTAINER_LISTS = ("env", "envFrom", "volumeMounts")
_CONTAINER_MAPS = ("securityContext", "readinessProbe", "livenessProbe", "startupProbe")
_RESOURCE_MAPS = ("limits", "requests")


def _containers(
    spec: dict[str, Any],
    spec_path: str,
    is_gpu: Callable[[str], bool],
    inline: tuple[str, ...] = (),
) -> tuple[ContainerView, ...]:
    views: list[ContainerView] = []
    for slot, c, list_name, cpath in _slots(spec, spec_path, inline):
        if len(views) & 63 == 63:
            give_way()  # a large pod spec is read beside the event loop (`turns`)
        # Field paths are built only for a message: most objects are well-formed.
        if not lists_ok(c, _CONTAINER_LISTS):
            for list_field in _CONTAINER_LISTS:
                list_of_mappings(c.get(list_field), f"{cpath}.{list_field}")
        if not maps_ok(c, _CONTAINER_MAPS):
            for map_field in _CONTAINER_MAPS:
                mapping(c.get(map_field), f"{cpath}.{map_field}")
        res = c.get("resources")
        if res is None:
            res = {}
        elif type(res) is not dict or not maps_ok(res, _RESOURCE_MAPS):
            res = mapping(res, f"{cpath}.resources")
            for section in _RESOURCE_MAPS:
                mapping(res.get(section), f"{cpath}.resources.{section}")
        limits = res.get("limits") or {}
        requests = res.get("requests") or {}
        gl, rgl = _gpu_quantities(limits, cpath, "limits", is_gpu)
        gr, rgr = _gpu_quantities(requests, cpath, "requests", is_gpu)
        claims = res.get("claims")
        name = c.get("name")
        views.append(
            ContainerView(
                raw=c,
                slot=slot,
                init=list_name == "initContainers",
                name=name if isinstance(name, str) else str(slot[-1]),
                field_path=cpath,
                gpu_limits=gl,
                gpu_requests=gr,
                raw_gpu_limits=rgl,
                raw_gpu_requests=rgr,
                asks_gpu=_asks(gl, gr),
                sidecar=list_name == "initContainers" and is_sidecar(c),
                ephemeral=list_name == "ephemeralContainers",
                claims=(
                    claim_refs(claims, f"{cpath}.resources.claims") if claims is not None else ()
                ),
            )
        )
    return tuple(views)


def _labels(meta: Any, key: str = "labels") -> dict[str, Any]:
    if not isinstance(meta, dict):
        return {}
    labels = meta.get(key)
    return labels if isinstance(labels, dict) else {}


def _owner_kinds(meta: Any) -> tuple[str, ...]:
    if not isinstance(meta, dict) or not isinstance(meta.get("ownerReferences"), list):
        return ()
    return tuple(
        ref["kind"]
        for ref in meta["ownerReferences"]
        if isinstance(ref, dict) and isinstance(ref.get("kind"), str)
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _replica_count(obj: dict[str, Any], path: tuple[str, ...] | None) -> int:
    """How many pods of each template run at once (replicas, parallelism); 1 when unsaid."""
    if path is None:
        return 1
    node: Any = obj
    for seg in path:
        node = _dict(node).get(seg)
    if node is None:
        return 1
    return node if isinstance(node, int) and not isinstance(node, bool) and node >= 0 else 1


def _count_at(obj: Any, path: tuple[str, ...], where: tuple[str | int, ...]) -> Any:
    """The value at `path`, its wildcard standing for the item `where` passed through (a
    replica path shares the template's wildcard, at the same place); None when absent."""
    node: Any = obj
    for i, seg in enumerate(path):
        key: str | int = where[i] if seg in (LIST_ITEMS, MAP_VALUES) else seg
        if isinstance(node, dict):
            node = node.get(key)
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return None
    return node


def _template_pods(
    obj: dict[str, Any], factors: tuple[Factor, ...], where: tuple[str | int, ...]
) -> int:
    """How many pods of the template at `where` run at once: the product of its factors."""
    pods = 1
    for factor in factors:
        count = factor.default
        for path in factor.paths:
            value = _count_at(obj, path, where)
            if value is not None:
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
                count = value if ok else factor.default
                break
        if factor.minus and (
            factor.minus_if is None or _count_at(obj, factor.minus_if, where) is not None
        ):
            count = max(0, count - factor.minus)
        pods *= count
    return pods


# The label LeaderWorkerSet gives each pod of a group: "0" is the leader, which takes the
# group's traffic; the others are workers that only join its model.
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def _serving(
    obj: dict[str, Any],
    mode: str,
    workers_if: tuple[str, ...] | None,
    where: tuple[str | int, ...],
    labels: dict[str, Any],
    kind: str,
) -> str:
    """Which containers of the pod spec at `where` take traffic: none in a worker template
    (`workers_if` reaches an object: a leader template beside it) or a LeaderWorkerSet's
    worker Pod (its worker index, a label LWS gives pods, not templates, is not 0)."""
    if not mode:
        return ""
    if workers_if is not None and isinstance(_count_at(obj, workers_if, where), dict):
        return ""
    index = labels.get(LWS_WORKER_INDEX) if where == ("spec",) and kind == "Pod" else None
    return "" if index is not None and index != "0" else mode


def _lone_name(
    obj: dict[str, Any],
    name: tuple[tuple[str, ...] | None, str],
    where: tuple[str | int, ...],
    kind: str,
) -> str | None:
    """What the controller calls a container-like object's container (the NIM operator's
    `<name>-ctr`); None: not said. The object itself when it is the whole `spec`."""
    path, suffix = name
    found = _count_at(obj, path, where) if path is not None else None
    if isinstance(found, str) and found:
        return found + suffix
    return kind.lower() if where == ("spec",) else None


def _check_pod_fields(spec: dict[str, Any], spec_path: str) -> None:
    if not lists_ok(spec, ("tolerations", "volumes")):
        for list_name in ("tolerations", "volumes"):
            list_of_mappings(spec.get(list_name), f"{spec_path}.{list_name}")
    for i, toleration in enumerate(spec.get("tolerations") or ()):
        for key in ("key", "operator", "effect"):
            value = toleration.get(key)
            if value is not None and not isinstance(value, str):
                raise UnreadableObject(
                    f"{spec_path}.tolerations[{i}].{key}",
                    f"expected a string, found {type(value).__name__}",
                )
    for text_field in ("priorityClassName", "nodeName", "serviceAccountName", "schedulerName"):
        value = spec.get(text_field)
        if value is not None and not isinstance(value, str):
            raise UnreadableObject(
                f"{spec_path}.{text_field}",
                f"expected a string, found {type(value).__name__}",
            )


def _lone_container(
    raw: dict[str, Any],
    where: str,
    key: str,
    is_gpu: Callable[[str], bool],
    given_name: str | None = None,
) -> ContainerView:
    """A container-like object outside any pod spec (TrainJob's spec.trainer, a NIMService's
    spec), named by its own `name`, else `given_name`, else its path."""
    res = mapping(raw.get(key), f"{where}.{key}")
    limits = mapping(res.get("limits"), f"{where}.{key}.limits")
    requests = mapping(res.get("requests"), f"{where}.{key}.requests")
    gl, rgl = _gpu_quantities(limits, where, "limits", is_gpu, key)
    gr, rgr = _gpu_quantities(requests, where, "requests", is_gpu, key)
    list_of_mappings(raw.get("env"), f"{where}.env")
    return ContainerView(
        raw=raw,
        slot=("containers", 0),
        init=False,
        name=raw["name"] if isinstance(raw.get("name"), str) else given_name or where,
        field_path=where,
        gpu_limits=gl,
        gpu_requests=gr,
        raw_gpu_limits=rgl,
        raw_gpu_requests=rgr,
        asks_gpu=_asks(gl, gr),
        resources_key=key,
    )


def _parent_meta(obj: dict[str, Any], where: tuple[str | int, ...]) -> Any:
    """The template's own metadata sits beside its spec; a bare Pod's is the object's."""
    parent: Any = obj
    for seg in where[:-1]:
        parent = parent[seg]
    return parent.get("metadata") if isinstance(parent, dict) else None


def pod_views(
    obj: Any,
    *,
    group: str,
    kind: str,
    is_gpu: Callable[[str], bool],
    table: WorkloadTable = DEFAULT_TABLE,
) -> list[PodView]:
    """Every pod spec inside `obj`; [] for kinds that hold none."""
    workload = table.get(group, kind)
    if workload is None:
        return []
    if not isinstance(obj, dict):
        raise UnreadableObject("object", f"expected a {kind} object, found {type(obj).__name__}")
    views: list[PodView] = []
    replicas = _replica_count(obj, workload.replicas)
    per_spec = zip(workload.spec_paths, workload.spec_replicas, workload.spec_serving, strict=True)
    for segments, factors, (serving, workers_if) in per_spec:
        for where, spec in walk(obj, segments, ()):
            if views:
                give_way()  # pod spec after pod spec: the event loop in between (`turns`)
            spec_path = dotted("", *where)
            pods = replicas if factors is None else _template_pods(obj, factors, where)
            spec = mapping(spec, spec_path)
            meta = _parent_meta(obj, where)
            labels = _labels(meta)
            _check_pod_fields(spec, spec_path)
            views.append(
                PodView(
                    spec=spec,
                    pointer=pointer(*where),
                    field_path=spec_path,
                    kind=kind,
                    labels=labels,
                    annotations=_labels(meta, "annotations"),
                    owner_kinds=_owner_kinds(meta) if kind == "Pod" else (kind,),
                    containers=_containers(spec, spec_path, is_gpu, workload.inline),
                    replicas=pods,
                    mutable=workload.mutate,
                    shm=workload.shm,
                    runtime=workload.runtime,
                    resource_claims=pod_claims(
                        spec.get("resourceClaims"), f"{spec_path}.resourceClaims"
                    ),
                    serving=_serving(obj, serving, workers_if, where, labels, kind),
                )
            )
    views += _container_path_views(obj, workload, is_gpu, replicas)
    return views


def _container_path_views(
    obj: dict[str, Any], workload: Workload, is_gpu: Callable[[str], bool], replicas: int
) -> list[PodView]:
    """One view per container-like object: a pod spec of that one container, never patched."""
    views = []
    for (segments, key), name in zip(
        workload.container_paths, workload.container_names, strict=True
    ):
        for where, raw in walk(obj, segments, ()):
            path = dotted("", *where)
            given = _lone_name(obj, name, where, workload.kind)
            container = _lone_container(mapping(raw, path), path, key, is_gpu, given)
            views.append(
                PodView(
                    spec={"containers": [container.raw]},
                    pointer=pointer(*where),
                    field_path=path,
                    kind=workload.kind,
                    labels={},
                    owner_kinds=(workload.kind,),
                    containers=(container,),
                    replicas=replicas,
                    mutable=False,
                    shm=False,
                )
            )
    return views
