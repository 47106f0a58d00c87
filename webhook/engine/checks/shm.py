"""A memory-backed /dev/shm for GPU containers: the runtime default of 64Mi breaks NCCL.

Never over the author's: a container that mounts anything at /dev/shm keeps it, a pod with
`hostIPC: true` keeps the host's, and a KServe predictor keeps what its serving runtime
brings (KServe merges the predictor over the runtime, so a volume added here would replace
the runtime's; `kserve.runtime_merge`). When that runtime cannot be told, nothing is added
and the `gpu-shm` validation says what to set instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhook.engine.checks.isolation import normalise
from webhook.engine.checks.kserve import runtime_merge
from webhook.engine.checks.resources import gpu_containers
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import ContainerView, PodView, UnreadableObject
from webhook.quantity import Amount, QuantityError, format_bytes, parse_quantity
from webhook.ruleset.models import RuleSettings

__all__ = ["SHM_PATH", "add_shm", "mounts_shm", "prepare", "runtime_shm_unknown", "shm_size"]

SHM_PATH = "/dev/shm"


def prepare(settings: RuleSettings) -> tuple[int, int, int, int, int]:
    """gpu-shm's sizes read once per rule set: the share of the memory limit as numerator and
    denominator (a Fraction's are read by interpreted properties), then min, max and default
    bytes."""
    share, low, high, default = settings.gpu_shm.sizes()
    return share.numerator, share.denominator, low, high, default


def mounts_shm(container: dict[str, Any]) -> bool:
    """Whether the container mounts anything at /dev/shm (`/dev//shm/` too: the same path)."""
    for m in container.get("volumeMounts") or ():
        path = m.get("mountPath") if isinstance(m, dict) else None
        # Only a path with "shm" in it can resolve to /dev/shm: skip resolving the others.
        if isinstance(path, str) and "shm" in path and normalise(path) == SHM_PATH:
            return True
    return False


def _memory_limit(c: ContainerView) -> Amount | None:
    limits = c.resources.get("limits") or {}
    if "memory" not in limits:
        return None
    try:
        return parse_quantity(limits["memory"])
    except QuantityError as exc:
        raise UnreadableObject(
            f"{c.field_path}.resources.limits.memory",
            f"{exc}; expected a Kubernetes quantity such as 64Gi",
        ) from None


def shm_size(c: ContainerView, ctx: Context) -> int:
    """A share of the memory limit, clamped to [min, max]; the floor never lifts it past half
    the limit.

    A memory-backed emptyDir is charged to the pod's memory: raised to the floor on a small
    limit (1Gi on a 512Mi limit, or the whole limit), /dev/shm alone could use up the memory
    the model server needs and get the container OOM-killed. There the share itself is used
    (256Mi of 512Mi at the default 50%), still four times the runtime's 64Mi.
    """
    numerator, denominator, low, high, default = ctx.rules.shm_sizes
    exact = _memory_limit(c)
    if exact is None:
        return default
    limit = int(exact)  # whole bytes; integer arithmetic is what the hot path can afford
    share = limit * numerator // denominator
    size = min(max(share, min(low, limit // 2)), high)
    # Whole mebibytes keep the emitted quantity readable (e.g. 1536Mi rather than a byte count).
    size = size // 2**20 * 2**20 or size
    return min(size, limit)


def _free_volume_name(spec: dict[str, Any], base: str, taken_elsewhere: frozenset[str]) -> str:
    """`base`, or `base-N`, free in the pod spec and among `taken_elsewhere` (the volumes of a
    runtime the spec is merged over, which a volume of the same name would replace)."""
    volumes = spec.get("volumes")
    # A forged review may carry any JSON here: only string names can clash with ours.
    taken = taken_elsewhere | {
        v["name"]
        for v in (volumes if isinstance(volumes, list) else ())
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    }
    if base not in taken:
        return base
    n = 1
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def _needing(pod: PodView) -> list[ContainerView]:
    """GPU containers without a /dev/shm of their own, in a pod whose /dev/shm is ours to add.

    A pod with `hostIPC: true` shares the host's /dev/shm on purpose: an emptyDir over it
    would undo that choice, so it needs none (and hears nothing about it).
    """
    if pod.spec.get("hostIPC") is True or not pod.shm:
        return []
    return [c for c in gpu_containers(pod) if not mounts_shm(c.raw)]


def _plan(pod: PodView, ctx: Context) -> tuple[list[ContainerView], frozenset[str]] | str:
    """(containers to give /dev/shm, volume names to avoid), or why nothing may be added.

    A KServe pod spec merged over a serving runtime: a container the runtime gives /dev/shm
    (every candidate runtime) needs none; one no candidate gives it gets ours, under a
    volume name none of them uses. When the runtime is unknown, or the candidates differ,
    nothing is added to the whole pod spec: any volume of ours might replace one of theirs.
    """
    needing = _needing(pod)
    merge = runtime_merge(pod, ctx.facts) if needing else None
    if merge is None:
        return needing, frozenset()
    if merge.runtimes is None:
        return merge.why
    keep = []
    for c in needing:
        other = merge.counterpart(c)
        given = [merge.provides_shm(rt, other) for rt in merge.runtimes] if other else [False]
        if all(given):
            continue
        if any(given):
            names = ", ".join(sorted(rt.name for rt in merge.runtimes))
            return f"candidate runtimes differ: {names}"
        keep.append(c)
    return keep, merge.volume_names()


def add_shm(spec: dict[str, Any], pod: PodView, ctx: Context) -> bool:
    """One shared volume for every GPU container without a /dev/shm mount.

    Existing volumes and mounts are never changed: a container that mounts anything at
    /dev/shm already made its choice (the hygiene rule reports it when not memory-backed).
    No volume with `hostIPC: true` or where a KServe runtime brings /dev/shm (`_plan`).
    """
    plan = _plan(pod, ctx)
    if isinstance(plan, str):
        return False  # the runtime is unknown: `runtime_shm_unknown` says so
    needing, runtime_volumes = plan
    if not needing:
        return False
    name = _free_volume_name(spec, ctx.settings.gpu_shm.volume_name, runtime_volumes)
    size = min(shm_size(c, ctx) for c in needing)
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": format_bytes(size)}},
    ]
    for c in needing:
        container = c.locate(spec)
        container["volumeMounts"] = [
            *(container.get("volumeMounts") or []),
            {"name": name, "mountPath": SHM_PATH},
        ]
    return True


def runtime_shm_unknown(pod: PodView, ctx: Context) -> Iterator[Finding]:
    """A KServe pod spec left without /dev/shm because its serving runtime cannot be told.

    Only while the mutation is on: it is what would otherwise have added one. Said once per
    pod spec, naming the container the runtime's /dev/shm would reach.
    """
    if not ctx.settings.gpu_shm.mutate:
        return
    if not pod.shm and pod.mutable:
        yield from _left_to_base(pod, ctx)
        return
    merge = runtime_merge(pod, ctx.facts)
    if merge is None:
        return  # not merged over a runtime (every other pod): nothing to say
    why = _plan(pod, ctx)
    if not isinstance(why, str):
        return
    needing = _needing(pod)
    c = next((c for c in needing if merge.counterpart(c)), needing[0])
    worker = merge.worker
    runtime = "runtime's workerSpec" if worker else "ServingRuntime"
    target = merge.counterpart(c)
    theirs = f"its container {target!r}" if target else "its container"
    size = format_bytes(shm_size(c, ctx))  # what would have been added
    yield Finding(
        rule="gpu-shm",
        summary=(
            f"gpu-shm: {c.label()} mounts no {SHM_PATH}; set one in its {runtime} (none "
            f"added: {why})"
        ),
        fix=(
            "give its ServingRuntime or ClusterServingRuntime"
            + (" (in spec.workerSpec)" if worker else "")
            + f" a memory-backed {SHM_PATH}: a volume "
            f"{{name: dshm, emptyDir: {{medium: Memory, sizeLimit: {size}}}}} and the mount "
            f"{{name: dshm, mountPath: {SHM_PATH}}} in {theirs}; or set both here, in "
            f"{pod.field_path}.volumes and {c.field_path}.volumeMounts. KServe merges this "
            "spec over the runtime by volume name and mount path, so gpu-admission adds none "
            "where it might replace the runtime's own"
        ),
        field=f"{c.field_path}.volumeMounts",
        # Without the runtimes (no facts) this never denies, whatever the mode: unknown is
        # not wrong. With them, a runtime that is not there can be.
        advisory=ctx.facts is None or ctx.facts.serving_runtimes is None,
    )


def _left_to_base(pod: PodView, ctx: Context) -> Iterator[Finding]:
    """A pod spec its controller merges over a base that mounts /dev/shm (an
    LLMInferenceService over its LLMInferenceServiceConfigs): none added, said once."""
    if pod.spec.get("hostIPC") is True:
        return
    needing = [c for c in gpu_containers(pod) if not mounts_shm(c.raw)]
    if not needing:
        return
    c = needing[0]
    size = format_bytes(shm_size(c, ctx))
    yield Finding(
        rule="gpu-shm",
        summary=(
            f"gpu-shm: {c.label()} mounts no {SHM_PATH} here; it gets the one of the "
            f"{pod.kind}'s base config (KServe's default template mounts 1Gi)"
        ),
        fix=(
            f"for a larger {SHM_PATH} (NCCL with tensor parallelism), set it in the config "
            f"this is merged over, or here: a volume {{name: dshm, emptyDir: {{medium: Memory, "
            f"sizeLimit: {size}}}}} in {pod.field_path}.volumes and the mount {{name: dshm, "
            f"mountPath: {SHM_PATH}}} in {c.field_path}.volumeMounts. gpu-admission adds none: "
            "the controller merges by volume name, so a volume of ours would replace the "
            "config's"
        ),
        field=f"{c.field_path}.volumeMounts",
        advisory=True,
    )
