"""GPU isolation: one model of how a container reaches GPU devices, one finding per way in.

A container should reach GPUs only through an allocation (resources, or a DRA claim): the
device plugin then hands it exactly the devices it was given. Every other way in is judged here,
in every container kind (regular, init, sidecar, ephemeral):

- `NVIDIA_VISIBLE_DEVICES` (rule visible-devices): set in `env`, through `valueFrom`, through
  `envFrom` (a ConfigMap or Secret, with or without a prefix), or left to the image, whose `ENV`
  says `all` in every CUDA image. With the NVIDIA container toolkit's defaults, that exposes
  every GPU on the node. `void` in a container that asks for no GPU gives it none; the mutation
  sets it wherever the pod can reach GPU nodes and the author left it unset.
- privileged mode (rule privileged-gpu): every device node of the host.
- a host path that reaches GPUs (rule host-gpu-devices, `checks.hostdevices`): device nodes, the
  host's root, the GPUs' sysfs, a container runtime's socket.

Only the env value a user set and host mounts are judged in every pod; the rest only matters
in pods that can land on a GPU node (`reach`).

Device plugins and node agents need these ways in by design. A denial of one that looks like
one (`node_agent`) leads with the exemption that lets it run, not with "remove".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from webhook.engine.checks.schedulable import why_not_whole_node
from webhook.engine.checks.trust import unknown_facts
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.hostreach import normalise
from webhook.engine.podviews import ContainerView, PodView
from webhook.engine.reach import can_reach_gpu_nodes, reach_unknown
from webhook.engine.sharing import scheduler_config_map_ref, written_before
from webhook.facts.devicekeys import VISIBLE_DEVICES

__all__ = [
    "ISOLATION_RULES",
    "hide_devices",
    "node_agent",
    "normalise",
    "privileged_gpu",
    "visible_devices",
]

# Typed: mypyc (setup.py) compiles this module in an import cycle with checks/__init__.
ISOLATION_RULES: frozenset[str] = frozenset(
    {"visible-devices", "privileged-gpu", "host-gpu-devices"}
)
HIDDEN = "void"  # the toolkit's value for "no GPU at all"
# Device plugins, GPU operators and node agents need these ways in: say how to let them.
SYSTEM = (
    ". If this is a device plugin, GPU operator or node agent that needs the devices, exempt "
    "its DaemonSet by name in the rule set's exemptions.workloads"
)

# ---- device plugins and node agents ------------------------------------------------------
# A node agent runs on every node: a DaemonSet, or a pod one owns. It looks like a GPU one
# when it mounts a kubelet socket directory that device plugins, DRA drivers and CSI node
# plugins register through, or the pod-resources API that GPU monitors (dcgm-exporter, AMD's
# metrics exporter) read; or when a container name, an image or a label value carries the
# name of a well-known one (NVIDIA's k8s-device-plugin, GPU Feature Discovery, dcgm-exporter,
# container toolkit, driver, MIG manager, DRA driver; NFD; AMD's device plugin, node labeller
# and metrics exporter; Intel's GPU plugin and XPU manager). The guess changes the advice in a
# denial, so names the author chose are good enough to go by. Only GPU evidence (the
# device-plugin or pod-resources sockets, or a GPU agent's name; not the CSI/DRA plugin
# directories every storage driver mounts) also keeps NVIDIA_VISIBLE_DEVICES=void off it:
# `void` would leave a device plugin or GPU monitor seeing no GPU, silently, so such a pod is
# denied with the exemption to add instead (`gpu_agent`).
GPU_SOCKET_DIRS = ("/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources")
KUBELET_SOCKET_DIRS = (
    *GPU_SOCKET_DIRS,
    "/var/lib/kubelet/plugins_registry",
    "/var/lib/kubelet/plugins",
)
AGENT_NAMES = (
    "device-plugin", "deviceplugin", "gpu-plugin", "dra-driver", "feature-discovery",
    "dcgm", "device-metrics-exporter", "node-labeller", "xpumanager", "container-toolkit",
    "nvidia/driver", "nvidia-driver", "gpu-driver", "driver-manager", "mig-manager",
    "mps-control", "vgpu", "gpu-operator",
)  # fmt: skip


def node_agent(pod: PodView, dirs: tuple[str, ...] = KUBELET_SOCKET_DIRS) -> str | None:
    """Why the pod looks like a device plugin or node agent (for the message), or None."""
    if pod.kind != "DaemonSet" and "DaemonSet" not in pod.owner_kinds:
        return None
    for volume in pod.spec.get("volumes") or []:
        host_path = volume.get("hostPath")
        path = host_path.get("path") if isinstance(host_path, dict) else None
        if not isinstance(path, str):
            continue
        host = normalise(path)
        if any(host == d or host.startswith(d + "/") for d in dirs):
            return f"it mounts {host}"
    named = [(f"image {c.raw.get('image')!r}", c.raw.get("image")) for c in pod.containers]
    named += [(f"container {c.name!r}", c.name) for c in pod.containers]
    named += [(f"label {k}={v}", v) for k, v in pod.labels.items()]
    for shown, text in named:
        if isinstance(text, str) and any(n in text.lower() for n in AGENT_NAMES):
            return f"its {shown}"
    return None


def gpu_agent(pod: PodView) -> str | None:
    """Why the pod looks like a GPU device plugin or GPU monitor, on GPU evidence only."""
    return node_agent(pod, GPU_SOCKET_DIRS)


def _exemption(pod: PodView, ctx: Context, why: str) -> str:
    """The exemption that lets a node agent run: its DaemonSet, by name. Never its namespace or
    service account: any pod of the namespace could name those and be admitted too."""
    ns = ctx.namespace
    found = ctx.workload
    name = found[1] if found is not None else "<its DaemonSet>"
    return (
        f"exempt it in the rule set with exemptions.workloads: [{{kind: DaemonSet, namespace: "
        f"{ns}, name: {name}}}] (this trusts whoever may create or update DaemonSets in {ns}; "
        "its pods are exempt only as the DaemonSet controller creates them); it looks like a "
        f"device plugin or node agent ({why}), which needs this access"
    )


def _agent(pod: PodView) -> str | None:
    """`node_agent(pod)`, worked out once per pod spec: every finding's fix asks it, and the
    answer walks the whole pod (asked per finding, C containers with a finding each cost C²)."""
    known = pod.agent
    if known is None:
        known = pod.agent = (node_agent(pod),)
    return known[0]


def _fix(pod: PodView, ctx: Context, fix: str, *, system: bool = True) -> str:
    """A denial's fix: for a device plugin or node agent, the exemption that lets it run,
    then the usual fix in case it is not one; for anything else the usual fix."""
    why = _agent(pod)
    if why is None:
        return fix + SYSTEM if system else fix
    return f"{_exemption(pod, ctx, why)}. If it is not one: {fix}"


def _explicit(c: ContainerView) -> tuple[int, dict[str, Any]] | None:
    """The `env` entry that sets the variable (the last one wins), if any: env beats envFrom."""
    found = None
    for i, env in enumerate(c.raw.get("env") or []):
        if env.get("name") == VISIBLE_DEVICES:
            found = (i, env)
    return found


def _source(ref: Mapping[str, Any]) -> tuple[str, str, Any] | None:
    """("ConfigMap"|"Secret", name, prefix) of one envFrom entry."""
    for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
        target = ref.get(key)
        if isinstance(target, dict):
            return kind, str(target.get("name") or ""), ref.get("prefix") or ""
    return None


def _from_env_from(c: ContainerView, ctx: Context) -> tuple[str, str, bool] | None:
    """How `envFrom` may set the variable: (what was found, field, definite), or None when no
    entry can.

    A ConfigMap or Secret can be created or edited after admission (the kubelet reads it when
    the container starts), so no source is ever trusted: the facts only tell a value that is
    already wrong (definite) from one that may become so.
    """
    entries = c.raw.get("envFrom") or []
    for i in range(len(entries) - 1, -1, -1):
        source = _source(entries[i])
        if source is None:
            continue
        kind, name, prefix = source
        if not isinstance(prefix, str) or not VISIBLE_DEVICES.startswith(prefix):
            continue  # this prefix can never spell the variable
        key = VISIBLE_DEVICES[len(prefix) :]
        field = f"{c.field_path}.envFrom[{i}]"
        known = None
        if ctx.facts is not None:
            known = ctx.facts.config_maps if kind == "ConfigMap" else ctx.facts.secrets
        shown = f"{kind} {name!r}" + (f" with prefix {prefix!r}" if prefix else "")
        value = (known.get(name) or {}).get(key) if known is not None else None
        if value is not None and value not in ctx.settings.visible_devices.allowed_values:
            return f"set to {value!r} by {shown} (key {key})", field, True
        return f"possibly set by {shown} (its keys can change)", field, False
    return None


# With `deviceListStrategy: volume-mounts`, the toolkit reads the devices a container gets from
# the names of mounts under this directory: a mount there asks for GPUs without an allocation.
DEVICE_LIST_DIR = "/var/run/nvidia-container-devices"


def _device_list_mounts(c: ContainerView) -> Iterator[tuple[int, str]]:
    for i, m in enumerate(c.raw.get("volumeMounts") or []):
        path = m.get("mountPath")
        if isinstance(path, str) and normalise(path).startswith(DEVICE_LIST_DIR):
            yield i, path


def _judged(pod: PodView) -> Iterator[ContainerView]:
    return (c for c in pod.containers if pod.focus is None or c.slot in pod.focus)


def visible_devices(pod: PodView, ctx: Context) -> Iterator[Finding]:
    cfg = ctx.settings.visible_devices
    allowed = cfg.allowed_values
    reach: bool | None = None
    for c in _judged(pod):
        if c.unresolved:
            yield _unresolved(pod, ctx, c)
        for i, path in _device_list_mounts(c):
            yield Finding(
                rule="visible-devices",
                summary=(
                    f"visible-devices: {c.label()} mounts {path!r}, which lists GPUs for the "
                    "NVIDIA toolkit; expected no mount there"
                ),
                fix=_fix(
                    pod,
                    ctx,
                    f"remove {c.field_path}.volumeMounts[{i}]: with deviceListStrategy "
                    "volume-mounts a mount there hands the container GPUs without an allocation. "
                    "Ask for GPUs in resources.limits instead",
                ),
                field=f"{c.field_path}.volumeMounts[{i}]",
            )
        explicit = _explicit(c)
        if explicit is not None:
            i, env = explicit
            field = f"{c.field_path}.env[{i}]"
            if env.get("valueFrom") is not None:
                shared = scheduler_config_map_ref(env, c) if c.shared_gpu else ""
                if shared and written_before(shared, ctx):
                    yield _written_before(pod, ctx, c, shared, field)
                    continue
                if shared:
                    continue  # the GPU-sharing scheduler's binder fills it (engine.sharing)
                found = "set through valueFrom"
            elif env.get("value") is not None and env.get("value") not in allowed:
                found = f"set to {env.get('value')!r}"
            else:
                continue  # env beats envFrom and the image: nothing else can set it
            yield _finding(pod, ctx, c, found, field, advisory=False)
            continue
        if reach is None:
            reach = can_reach_gpu_nodes(pod, ctx)
        if not reach:
            continue
        via = _from_env_from(c, ctx)
        if via is not None:
            found, field, definite = via
            yield _finding(
                pod,
                ctx,
                c,
                found,
                field,
                advisory=not definite and cfg.when_unknown == "allow",
            )
        elif c.shared_gpu and pod.mutable and not pod.runtime:
            yield _shared_left_to_image(pod, ctx, c)
        elif not c.asks_gpu and not c.unresolved and pod.mutable and not pod.runtime:
            # Left to the image. Not where `void` is never added: kinds judged but not patched
            # (their pods get it when created) and runtimes others are merged over.
            yield Finding(
                rule="visible-devices",
                summary=(
                    f"visible-devices: {c.label()} asks for no GPU in a pod that can run on GPU "
                    f"nodes and leaves {VISIBLE_DEVICES} to its image (CUDA images set 'all'); "
                    f"expected {HIDDEN!r}"
                ),
                fix=_fix(
                    pod,
                    ctx,
                    f"add {{name: {VISIBLE_DEVICES}, value: {HIDDEN}}} to {c.field_path}.env, "
                    "or ask for a GPU in resources.limits if the container needs one",
                    system=False,
                ),
                field=f"{c.field_path}.env",
            )


def _written_before(pod: PodView, ctx: Context, c: ContainerView, name: str, field: str) -> Finding:
    """The scheduler's ConfigMap exists before the pod: not the scheduler's writing."""
    return Finding(
        rule="visible-devices",
        summary=(
            f"visible-devices: {c.label()} takes {VISIBLE_DEVICES} ({field}) from ConfigMap "
            f"{name!r}, "
            "which already exists with a device key as the pod is created; expected the "
            "sharing scheduler's binder to create it, for this pod, at bind time"
        ),
        fix=_fix(
            pod,
            ctx,
            f"delete ConfigMap {name!r} (whoever wrote it could hand the container every GPU "
            "of its node) and create the pod again; if the pod sets the sharing scheduler's "
            "ConfigMap-name annotation itself, remove it so the scheduler's webhook picks a "
            "fresh name",
            system=False,
        ),
        field=field,
    )


def _unresolved(pod: PodView, ctx: Context, c: ContainerView) -> Finding:
    """A container using a claim whose device class is not known (a template made in the same
    apply, one the watch has not seen yet, a class the cluster lacks): judged as possibly a
    GPU container, so never given `void`, and said so rather than passed in silence."""
    which = "; ".join(c.unresolved)
    return Finding(
        rule="visible-devices",
        summary=(f"visible-devices: {c.label()} uses {which}, not known: not voided, no GPU ask"),
        fix=(
            f"nothing to change if it hands out no GPU ({VISIBLE_DEVICES} is left as it is, "
            "no GPU toleration is added). Otherwise create the DeviceClass (and the "
            "ResourceClaimTemplate or ResourceClaim) before the pod, so its GPUs are judged "
            "and no GPU toleration is missing; a class that hands out GPUs under another name "
            "belongs in the rule set's gpuDeviceClasses"
        ),
        field=f"{c.resources_path}.claims",
        advisory=True,
    )


def _shared_left_to_image(pod: PodView, ctx: Context, c: ContainerView) -> Finding:
    """A shared container with the variable left to its image: what the mutations set (our
    `void`, then the sharing scheduler's ConfigMap reference) is missing, as when both mutating
    webhooks were skipped (failurePolicy Ignore). Validation requires it all the same."""
    return Finding(
        rule="visible-devices",
        summary=(
            f"visible-devices: {c.label()} is given part of a GPU by the sharing scheduler and "
            f"leaves {VISIBLE_DEVICES} to its image (CUDA images set 'all': every GPU of the "
            f"node); expected {HIDDEN!r} or the sharing scheduler's ConfigMap reference"
        ),
        fix=_fix(
            pod,
            ctx,
            f"add {{name: {VISIBLE_DEVICES}, value: {HIDDEN}}} to {c.field_path}.env (the "
            "sharing scheduler's webhook then points it at the ConfigMap its binder fills); the "
            "mutating webhooks that set it were skipped",
            system=False,
        ),
        field=f"{c.field_path}.env",
    )


def _finding(
    pod: PodView,
    ctx: Context,
    c: ContainerView,
    found: str,
    field: str,
    *,
    advisory: bool,
) -> Finding:
    allowed = ", ".join(repr(v) for v in ctx.settings.visible_devices.allowed_values)
    if c.shared_gpu:
        how = (
            "the GPU-sharing scheduler's webhook sets this variable from a ConfigMap its binder "
            "fills (valueFrom.configMapKeyRef), and any other source can expose every GPU on "
            "the node"
        )
    elif c.asks_gpu:
        how = (
            "the device plugin sets this variable to the devices it allocated, and any other "
            "value can expose every GPU on the node"
        )
    else:
        how = (
            "to get GPUs ask for them in resources.limits (e.g. nvidia.com/gpu: 1); any other "
            "value can expose every GPU on the node"
        )
    if "envFrom" in field:
        change = (
            f"load the keys you need with env valueFrom (configMapKeyRef/secretKeyRef) instead "
            f"of {field}, or give it a prefix that cannot spell {VISIBLE_DEVICES} (e.g. APP_)"
        )
    else:
        change = f"remove {field}"
    return Finding(
        rule="visible-devices",
        summary=(
            f"visible-devices: {c.label()} has {VISIBLE_DEVICES} {found}; "
            f"expected unset or one of {allowed}"
        ),
        fix=_fix(pod, ctx, f"{change}. {how[0].upper()}{how[1:]}"),
        field=field,
        advisory=advisory,
    )


def hide_devices(spec: dict[str, Any], pod: PodView, ctx: Context) -> bool:
    """`NVIDIA_VISIBLE_DEVICES=void` for every container that asks for no GPU and leaves the
    variable unset, in a pod that can reach GPU nodes. A value the author set is judged by
    the validation, never overwritten; running it twice changes nothing.

    Not in a pod that looks like a device plugin or node agent: `void` would break it
    silently (it needs every GPU its image exposes); the validation denies it instead, with
    the exemption that lets it run."""
    if pod.runtime or not can_reach_gpu_nodes(pod, ctx) or gpu_agent(pod) is not None:
        return False
    changed = False
    for c in _judged(pod):
        # A shared container gets `void` too until its scheduler's webhook sets the variable
        # (a later entry of the same name wins): the part of a GPU is granted at bind time.
        if (c.asks_gpu and not c.shared_gpu) or c.unresolved or _explicit(c) is not None:
            continue  # a claim not known yet may be a GPU claim: `void` would hide its GPUs
        container = c.locate(spec)
        container["env"] = [
            *(container.get("env") or []),
            {"name": VISIBLE_DEVICES, "value": HIDDEN},
        ]
        changed = True
    return changed


def privileged_gpu(pod: PodView, ctx: Context) -> Iterator[Finding]:
    """Privileged containers see every device node; only pods that can reach GPU nodes count."""
    judged = [c for c in _judged(pod) if (c.raw.get("securityContext") or {}).get("privileged")]
    if not judged:
        return
    if not can_reach_gpu_nodes(pod, ctx):
        # Stale facts may miss a GPU node with no GPU taint, which this pod would reach.
        why = reach_unknown(ctx)
        if why:
            for c in judged:
                if c.raw["securityContext"]["privileged"] is True:
                    field = f"{c.field_path}.securityContext.privileged"
                    when = ctx.settings.privileged_gpu.when_unknown
                    yield unknown_facts("privileged-gpu", when, f"{c.label()}: {why}", field)
        return
    # A pod that fills every node it can run on (all 8 GPUs of an 8-GPU node, as
    # GPUDirect-TCPX pods with a privileged networking sidecar do) shares its node's GPUs with
    # no one: its privileged containers that ask for no GPU see only the pod's own.
    sidecars = pod.asks_gpu and any(not c.asks_gpu for c in judged)
    not_whole = why_not_whole_node(pod, ctx) if sidecars else None
    for c in judged:
        if c.raw["securityContext"]["privileged"] is not True:
            continue
        if sidecars and not c.asks_gpu and not_whole is None:
            continue
        field = f"{c.field_path}.securityContext.privileged"
        what = "asks for a GPU" if c.asks_gpu else "runs in a pod that can run on GPU nodes"
        because = ""
        if not c.asks_gpu and not_whole is not None:
            because = f". A pod that fills every node it can run on may keep it, but {not_whole}"
        yield Finding(
            rule="privileged-gpu",
            summary=f"privileged-gpu: {c.label()} {what} and sets privileged: true",
            fix=_fix(
                pod,
                ctx,
                f"remove {field}: a privileged container sees every GPU on the node, not only "
                "the ones allocated to it. Add the specific capabilities it needs instead"
                + because,
            ),
            field=field,
        )
