"""GPU isolation: nothing may reach GPUs the device plugin did not hand it.

With the NVIDIA container toolkit, `NVIDIA_VISIBLE_DEVICES=all` in a pod that asks for no GPU
exposes every GPU on the node. Privileged containers and hostPath mounts of the device nodes
get around the device plugin the same way.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterator

from webhook.engine.checks.resources import gpu_containers
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView

__all__ = ["host_gpu_devices", "privileged_gpu", "visible_devices"]

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"


def visible_devices(pod: PodView, ctx: Context) -> Iterator[Finding]:
    allowed = ctx.settings.visible_devices.allowed_values
    for c in pod.containers:
        for i, env in enumerate(c.raw.get("env") or []):
            if env.get("name") != VISIBLE_DEVICES:
                continue
            field = f"{c.field_path}.env[{i}]"
            if env.get("valueFrom") is not None:
                found = "set through valueFrom"
            elif env.get("value") not in allowed and env.get("value") is not None:
                found = f"set to {env.get('value')!r}"
            else:
                continue
            shown = ", ".join(repr(v) for v in allowed)
            yield Finding(
                rule="visible-devices",
                summary=(
                    f"visible-devices: {c.label()} has {VISIBLE_DEVICES} {found}; "
                    f"expected unset or one of {shown}"
                ),
                fix=(
                    f"remove {field}. To get GPUs ask for them in resources.limits "
                    "(e.g. nvidia.com/gpu: 1); the device plugin then sets this variable to the "
                    "devices it allocated, and a hand-set value can expose every GPU on the node"
                ),
                field=field,
            )


def privileged_gpu(pod: PodView, ctx: Context) -> Iterator[Finding]:
    for c in gpu_containers(pod):
        sc = c.raw.get("securityContext") or {}
        if sc.get("privileged") is True:
            field = f"{c.field_path}.securityContext.privileged"
            yield Finding(
                rule="privileged-gpu",
                summary=f"privileged-gpu: {c.label()} asks for a GPU and sets privileged: true",
                fix=(
                    f"remove {field}: a privileged container sees every GPU on the node, not "
                    "only the ones allocated to it. Add the specific capabilities it needs instead"
                ),
                field=field,
            )


def host_gpu_devices(pod: PodView, ctx: Context) -> Iterator[Finding]:
    patterns = ctx.settings.host_gpu_devices.paths
    for i, volume in enumerate(pod.spec.get("volumes") or []):
        host_path = volume.get("hostPath")
        if not isinstance(host_path, dict) or not isinstance(host_path.get("path"), str):
            continue
        raw = host_path["path"]
        path = posixpath.normpath(raw) if raw else raw
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        if not any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns):
            continue
        field = f"{pod.field_path}.volumes[{i}].hostPath.path"
        yield Finding(
            rule="host-gpu-devices",
            summary=(
                f"host-gpu-devices: volume {volume.get('name')!r} mounts host path {raw!r}; "
                f"expected no host device nodes"
            ),
            fix=(
                f"remove the volume at {pod.field_path}.volumes[{i}] and ask for GPUs in "
                "resources.limits; device nodes mounted from the host bypass GPU allocation"
            ),
            field=field,
        )
