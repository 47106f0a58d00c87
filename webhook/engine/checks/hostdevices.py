"""host-gpu-devices: host paths that reach GPUs without an allocation, each denial naming how.

A hostPath volume is judged by what the path reaches (`engine.hostreach`, the table in
`ruleset.hostpaths`): GPU device nodes, the host's root, the GPUs' sysfs, or a container
runtime's socket. Every pod is judged, whether or not it can land on a GPU node: a host path
is fixed in the object and cheap to tell.

Device-injection annotations (`engine.injection`: GKE's NRI device injector, the NRI sample
plugins' devices, mounts and CDI devices) are judged the same way, as host paths of the devices
and mount sources they name: a node plugin adds them without an allocation.

A pod that fills every node it can run on (its GPU ask takes all of each node's GPUs) shares its
node's GPUs with no one: as for privileged mode, device nodes and sysfs reach only its own. The
host's root and a runtime socket reach past the GPUs, and stay denied.
"""

from __future__ import annotations

from collections.abc import Iterator

from webhook.engine.checks.isolation import _fix, _judged
from webhook.engine.checks.schedulable import why_not_whole_node
from webhook.engine.context import Context
from webhook.engine.fields import dotted
from webhook.engine.findings import Finding
from webhook.engine.hostreach import Reach, classify, normalise, rows_for
from webhook.engine.injection import Injected, injections
from webhook.engine.podviews import ContainerView, PodView
from webhook.ruleset.hostpaths import DEVICES, EXEMPTABLE, GPU_SYSFS, HOST_ROOT, KINDS, RUNTIME

__all__ = ["host_gpu_devices"]

RULE = "host-gpu-devices"

# What to do instead, by what the path reaches.
_INSTEAD = {
    HOST_ROOT: (
        "mount only the host directory the container needs: /proc, a process's directory, "
        "root, working directory or open files lead to the host's /"
    ),
    GPU_SYSFS: (
        "mount only a sysfs directory that holds no device, such as /sys/fs/cgroup; readOnly "
        "does not make it safe: a GPU's memory BARs can still be read"
    ),
    RUNTIME: (
        "talk to the Kubernetes API instead: a runtime socket starts containers with any "
        "device of the node, outside every admission check"
    ),
}
_DEFAULT = (
    "mount a narrower host path, and ask for GPUs in resources.limits; device nodes mounted "
    "from the host bypass GPU allocation"
)


def _whole_node(pod: PodView, ctx: Context, reach: Reach) -> tuple[bool, str]:
    """(exempt, why not) for a pod that asks for GPUs: exempt when it fills every node it can
    run on and the path reaches only GPUs; else the words that say why not (or "")."""
    if reach.kind not in EXEMPTABLE or not pod.asks_gpu:
        return False, ""
    why_not = why_not_whole_node(pod, ctx)
    if why_not is None:
        return True, ""
    return False, f". A pod that fills every node it can run on may keep it, but {why_not}"


def host_gpu_devices(pod: PodView, ctx: Context) -> Iterator[Finding]:
    volumes = [
        (i, v, v["hostPath"]["path"])
        for i, v in enumerate(pod.spec.get("volumes") or [])
        if isinstance(v.get("hostPath"), dict) and isinstance(v["hostPath"].get("path"), str)
    ]
    injected = injections(pod.annotations) if pod.annotations else []
    if injected:
        yield from _annotations(pod, ctx, injected)
    if not volumes:
        return  # nearly every pod: nothing to classify
    rows = rows_for(ctx.rules.is_gpu)
    listed = ctx.settings.host_gpu_devices.paths
    mounted_by: dict[str, list[ContainerView]] = {}
    for c in _judged(pod):
        for m in c.raw.get("volumeMounts") or []:
            mounted_by.setdefault(str(m.get("name")), []).append(c)
    for i, volume, raw in volumes:
        reach = classify(normalise(raw), rows, listed)
        if reach is None:
            continue
        users = mounted_by.get(str(volume.get("name")), [])
        if pod.focus is not None and not users:
            continue  # an ephemeral update: only the new containers' mounts are new
        exempt, because = _whole_node(pod, ctx, reach)
        if exempt:
            continue
        who = ", ".join(c.label() for c in users) or "no container yet"
        field = f"{pod.field_path}.volumes[{i}]"
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: volume {volume.get('name')!r} mounts host path {raw!r} "
                f"(mounted by {who}), which {reach.why}; expected no host path that reaches GPUs"
            ),
            fix=_fix(
                pod,
                ctx,
                f"remove the volume at {field} ({_INSTEAD.get(reach.kind, _DEFAULT)})" + because,
            ),
            field=f"{field}.hostPath.path",
        )


_CDI = Reach(
    DEVICES, f"{KINDS[DEVICES]} (a CDI device: the node's CDI specs hand out its device nodes)"
)
_UNREADABLE = "unreadable"


def _reach(item: Injected, pod: PodView, ctx: Context) -> Reach | None:
    if item.unreadable:
        return Reach(_UNREADABLE, f"cannot be read exactly: {item.unreadable}")
    if item.cdi:
        return _CDI
    rows = rows_for(ctx.rules.is_gpu)
    return classify(normalise(item.host_path), rows, ctx.settings.host_gpu_devices.paths)


def _annotations(pod: PodView, ctx: Context, injected: list[Injected]) -> Iterator[Finding]:
    """One finding per annotation that injects something reaching GPUs (its first such item
    named), or that cannot be read exactly."""
    names = {c.name for c in pod.containers}
    focus = {c.name for c in _judged(pod)} if pod.focus is not None else None
    meta = pod.field_path.rsplit(".spec", 1)[0] + ".metadata" if "." in pod.field_path else ""
    meta = meta or "metadata"
    seen: dict[str, int] = {}
    first: dict[str, tuple[Injected, Reach]] = {}
    for item in injected:
        if focus is not None and item.container and item.container not in focus:
            continue  # an ephemeral update: only what reaches the new containers is new
        reach = _reach(item, pod, ctx)
        if reach is None:
            continue
        seen[item.key] = seen.get(item.key, 0) + 1
        first.setdefault(item.key, (item, reach))
    for key, (item, reach) in first.items():
        exempt, because = _whole_node(pod, ctx, reach)
        if exempt:
            continue
        if not item.container:
            target = "every container"
        elif item.container in names:
            target = f'container "{item.container}"'
        else:
            target = f'container "{item.container}" (none yet)'
        field = dotted(meta, "annotations", key)
        more = f" and {seen[key] - 1} more" if seen[key] > 1 else ""
        if reach.kind == _UNREADABLE:
            summary = f"annotation {key!r} for {target} {reach.why}"
            fix = (
                f"write {field} as the node plugin documents it, a block list of plain "
                "entries (- path: /dev/...), or remove it; a value the webhook cannot read "
                "exactly may inject any device"
            )
        else:
            summary = (
                f"annotation {key!r} injects {item.what}{more} into {target}, which {reach.why}"
            )
            fix = (
                f"remove {field}: a node plugin adds what it lists without an allocation. Ask "
                "for GPUs in resources.limits" + because
            )
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: {summary}; expected no device injection that reaches GPUs",
            fix=_fix(pod, ctx, fix),
            field=field,
        )
