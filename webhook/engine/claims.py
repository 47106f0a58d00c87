"""DRA claims as GPU asks: which containers a pod's resource claims give GPUs, through the facts.

A pod names its claims (`spec.resourceClaims`: a ResourceClaimTemplate or a ResourceClaim) and
each container the claims it uses (`resources.claims`, optionally one request of a claim). Only
the template or claim says which DeviceClass a request draws from, and only the rule set
(`gpuDeviceClasses`) says which classes hand out GPUs. `resolve` reads both once per request
and marks the containers whose claims reach a GPU class as GPU containers (`asks_gpu`, with
their `gpu_classes`), so every rule treats them as it treats `nvidia.com/gpu`.

What is not known is not a GPU ask, and not "no GPU" either: no facts, a template or claim the
facts lack (made in the same `kubectl apply`, or not seen by the watch yet), a class the
cluster does not have. Such a container is marked `unresolved`: it is never denied for it (a
guess would deny real pods), never given `NVIDIA_VISIBLE_DEVICES=void` (it may well be a GPU
container), gets a warning naming the claim, and keeps the pod out of
`gpu-toleration-without-gpu` (`may_ask_gpu`). GPU tolerations are added only for classes
known to be GPU classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from webhook.engine.context import Context, RulesInForce
from webhook.engine.fields import UnreadableObject
from webhook.engine.podviews import ContainerView, PodView
from webhook.facts.dra import (
    IMPLICIT_PREFIX,
    MAX_ALLOCATION,
    QUOTA_SUFFIX,
    ClaimRequest,
    ClaimSpec,
    DeviceClass,
    DraFacts,
    device_key,
)
from webhook.quantity import Amount, QuantityError, parse_quantity, positive

__all__ = [
    "MAX_ALLOCATION",
    "NewDevices",
    "class_of_key",
    "device_totals",
    "dra_resource_names",
    "gpu_class",
    "may_ask_gpu",
    "new_devices",
    "resolve",
    "tolerated_classes",
]


def gpu_class(name: str, rules: RulesInForce, dra: DraFacts | None) -> bool | None:
    """Whether DeviceClass `name` hands out GPUs: True, False, or None (not known).

    With the cluster's DeviceClasses known, a class that is not there is unknown (not a GPU
    ask), and one that is counts by its name or the drivers its selectors require. Without
    them only the name can tell.
    """
    classes = dra.device_classes if dra is not None else None
    if classes is None:
        return True if rules.gpu_class_names.matches(name) else None
    found = classes.get(name)
    if found is None:
        partial = dra is not None and dra.classes_partial
        return True if partial and rules.gpu_class_names.matches(name) else None
    return rules.gpu_class_names.matches(name) or any(
        rules.gpu_drivers.matches(d) for d in found.drivers
    )


def _spec(claim: tuple[str, str, str], dra: DraFacts | None) -> ClaimSpec | None:
    """The spec a pod claim gets: its template's, or the named claim's; None: not known."""
    if dra is None:
        return None
    _, template, existing = claim
    if template:
        return dra.templates.get(template) if dra.templates is not None else None
    if existing:
        return dra.claims.get(existing) if dra.claims is not None else None
    return None


def _requests(spec: ClaimSpec, request: str) -> Iterator[tuple[int, ClaimRequest]]:
    """The requests a container gets: all of them, or the one it names."""
    wanted = request.split("/", 1)[0]  # "main/sub" names the request "main"
    return ((i, r) for i, r in enumerate(spec) if not wanted or r.name == wanted)


def _known_as(claim: tuple[str, str, str]) -> str:
    """What a pod claim names, for messages: 'ResourceClaimTemplate t' or 'ResourceClaim c'."""
    _, template, existing = claim
    return f"ResourceClaimTemplate {template}" if template else f"ResourceClaim {existing}"


def _container_classes(
    c: ContainerView,
    claims: dict[str, tuple[str, str, str]],
    rules: RulesInForce,
    dra: DraFacts | None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the GPU classes the container's claims reach, its claims whose class is not known)."""
    found: list[str] = []
    unknown: list[str] = []
    for name, request in c.claims:
        claim = claims.get(name)
        if claim is None:
            continue  # names no claim of the pod: the apiserver refuses the pod itself
        spec = _spec(claim, dra)
        if spec is None:
            if claim[1] or claim[2]:
                unknown.append(f'claim "{name}" ({_known_as(claim)})')
            continue
        for _, req in _requests(spec, request):
            for alt in req.alternatives:
                is_gpu = gpu_class(alt.device_class, rules, dra)
                if is_gpu is None:
                    text = f'claim "{name}" (DeviceClass {alt.device_class})'
                    if text not in unknown:
                        unknown.append(text)
                elif is_gpu and alt.device_class not in found:
                    found.append(alt.device_class)
    return tuple(found), tuple(unknown)


def resolve(views: list[PodView], rules: RulesInForce, dra: DraFacts | None) -> list[PodView]:
    """The views with every container whose claims, or plain resources DRA serves (a class's
    implicit `deviceclass.resource.kubernetes.io/<class>`, its `extendedResourceName`), reach a
    GPU class marked a GPU container, and every one whose claims' or implicit resources'
    classes are not known marked `unresolved`.

    Pods with neither (nearly all) are returned as they are, at the cost of a few tests each.
    """
    served = _served_names(dra)
    out = []
    for view in views:
        claims = {claim[0]: claim for claim in view.resource_claims}
        containers = []
        changed = False
        for c in view.containers:
            classes: tuple[str, ...] = ()
            unknown: tuple[str, ...] = ()
            if c.claims and claims:
                classes, unknown = _container_classes(c, claims, rules, dra)
            plain = _plain_asks(c, rules, dra, served)
            if plain is not None:
                c = plain
                classes = (*c.gpu_classes, *(k for k in classes if k not in c.gpu_classes))
                unknown = (*c.unresolved, *unknown)
            if classes or unknown or plain is not None:
                asks = c.asks_gpu or bool(classes)
                c = dataclasses.replace(c, asks_gpu=asks, gpu_classes=classes, unresolved=unknown)
                changed = True
            containers.append(c)
        if changed:
            view = dataclasses.replace(view, containers=tuple(containers))
        out.append(view)
    return out


# The last DeviceClass map read, and the plain names its classes serve (`extendedResourceName`
# -> class): classes change rarely, reviews are many. The map is replaced, never edited, on
# a change, and kept here with its answer, so an identity test is enough.
_SERVED: list[tuple[Mapping[str, DeviceClass] | None, dict[str, str]]] = [(None, {})]


def _served_names(dra: DraFacts | None) -> dict[str, str]:
    classes = dra.device_classes if dra is not None else None
    if not classes:
        return {}
    last, names = _SERVED[0]
    if last is not classes:
        names = {
            dc.extended_resource_name: n for n, dc in classes.items() if dc.extended_resource_name
        }
        _SERVED[0] = (classes, names)
    return names


def _plain_asks(
    c: ContainerView, rules: RulesInForce, dra: DraFacts | None, served: dict[str, str]
) -> ContainerView | None:
    """The container with the plain resources DRA serves from GPU classes added to its GPU
    asks (and those classes to `gpu_classes`); None when it asks for none."""
    res = c.resources
    limits, requests = res.get("limits"), res.get("requests")
    names = [
        n
        for section in (limits, requests)
        if isinstance(section, dict)
        for n in section
        if isinstance(n, str)
        and (n.startswith(IMPLICIT_PREFIX) or n in served)
        and not _zero(section[n])
    ]
    if not names:
        return None
    classes: list[str] = []
    unknown: list[str] = []
    extra: list[str] = []
    for name in dict.fromkeys(names):
        device_class = name[len(IMPLICIT_PREFIX) :] if name.startswith(IMPLICIT_PREFIX) else ""
        if not device_class:
            device_class = served[name]
        is_gpu = gpu_class(device_class, rules, dra)
        if is_gpu is None and rules.is_gpu(name):
            is_gpu = True  # a GPU name by the rule set's own list
        if is_gpu is None:
            if name.startswith(IMPLICIT_PREFIX):
                unknown.append(f"resource {name}")  # the name holds the class
            continue
        if not is_gpu:
            continue
        if device_class not in classes:
            classes.append(device_class)
        if not rules.is_gpu(name):
            extra.append(name)
    gl, gr = dict(c.gpu_limits), dict(c.gpu_requests)
    rl, rr = dict(c.raw_gpu_limits), dict(c.raw_gpu_requests)
    for name in extra:
        for section, parsed, raw, key in (
            (limits, gl, rl, "limits"),
            (requests, gr, rr, "requests"),
        ):
            if isinstance(section, dict) and name in section:
                try:
                    parsed[name] = parse_quantity(section[name])
                except QuantityError as exc:
                    raise UnreadableObject(
                        f'{c.resources_path}.{key}["{name}"]',
                        f"{exc}; expected a Kubernetes quantity such as 1 or 2",
                    ) from None
                raw[name] = section[name]
    asks = c.asks_gpu or any(positive(v) for v in (*gl.values(), *gr.values()))
    return dataclasses.replace(
        c,
        gpu_limits=gl,
        gpu_requests=gr,
        raw_gpu_limits=rl,
        raw_gpu_requests=rr,
        asks_gpu=asks,
        gpu_classes=(*c.gpu_classes, *(k for k in classes if k not in c.gpu_classes)),
        unresolved=(*c.unresolved, *unknown),
    )


def _zero(value: object) -> bool:
    """An amount of 0: no ask, as `nvidia.com/gpu: 0` is none (and the routing CEL skips
    it). What does not parse is kept, so that it is named as unreadable."""
    try:
        return parse_quantity(value) == 0
    except QuantityError:
        return False


def may_ask_gpu(pod: PodView, ctx: Context) -> bool:
    """Whether some claim of the pod could hand out GPUs: it is a GPU claim, or what it draws
    from is not known. Only a claim whose every class is known and no GPU class is not."""
    dra = ctx.dra
    for claim in pod.resource_claims:
        spec = _spec(claim, dra)
        if spec is None:
            return True
        for request in spec:
            if any(
                gpu_class(a.device_class, ctx.rules, dra) is not False for a in request.alternatives
            ):
                return True
    return False


@dataclass(frozen=True, slots=True)
class NewDevices:
    """GPU devices of one class that one request of a claim made for the pod takes."""

    claim: str  # the pod's claim name
    template: str  # the ResourceClaimTemplate it is made from
    request: str
    index: int  # of the request in the template's spec.spec.devices.requests
    device_class: str
    count: int | None  # None: allocationMode All
    containers: tuple[str, ...]  # the containers that use it

    def devices(self, all_as: int) -> int:
        return all_as if self.count is None else self.count

    def describe(self) -> str:
        """For messages: where the devices come from and who uses them."""
        count = "allocationMode All" if self.count is None else str(self.count)
        users = ", ".join(f'"{c}"' for c in self.containers) or "no container"
        return (
            f'claim "{self.claim}" (ResourceClaimTemplate {self.template}, request '
            f'"{self.request}": {count} {self.device_class}) used by container {users}'
        )


def new_devices(pod: PodView, ctx: Context) -> list[NewDevices]:
    """The GPU devices the pod's claims will take anew: those made from templates (one claim
    per pod). A ResourceClaim named in the pod exists already; what it takes is counted
    where it is (quota `used`, the namespace's claims), never again per pod.

    For `firstAvailable`, each class's largest alternative, as ResourceQuota counts it.
    """
    dra = ctx.dra
    if dra is None or not pod.resource_claims:
        return []
    # Who uses each claim, built once: a pod may hold thousands of claims and containers.
    using: dict[str, list[str]] = {}
    for c in pod.containers:
        for n in dict.fromkeys(n for n, _ in c.claims):
            using.setdefault(n, []).append(c.name)
    out = []
    for claim in pod.resource_claims:
        name, template, _ = claim
        spec = _spec(claim, dra) if template else None
        if not spec:
            continue
        users = tuple(using.get(name, ()))
        for i, request in enumerate(spec):
            largest: dict[str, int | None] = {}
            for alt in request.alternatives:
                if gpu_class(alt.device_class, ctx.rules, dra) is not True:
                    continue
                seen = largest.get(alt.device_class, 0)
                if alt.count is None or seen is None:
                    largest[alt.device_class] = None
                else:
                    largest[alt.device_class] = max(seen, alt.count)
            for device_class, count in largest.items():
                out.append(NewDevices(name, template, request.name, i, device_class, count, users))
    return out


def device_totals(asks: list[NewDevices], all_as: int) -> dict[str, Amount]:
    """The asks summed by `device_key`, an `All` request counted as `all_as` devices."""
    out: dict[str, Amount] = {}
    for ask in asks:
        key = device_key(ask.device_class)
        out[key] = out.get(key, 0) + ask.devices(all_as)
    return out


def class_of_key(key: str) -> str:
    """The DeviceClass a `<class>.deviceclass.resource.k8s.io/devices` key counts; "" else."""
    return key[: -len(QUOTA_SUFFIX)] if key.endswith(QUOTA_SUFFIX) else ""


def dra_resource_names(dra: DraFacts | None) -> frozenset[str]:
    """Plain resource names DRA devices satisfy (DeviceClass `extendedResourceName`, and each
    class's implicit `deviceclass.resource.kubernetes.io/<class>`): schedulable with no node
    listing them. Only known DeviceClasses count."""
    classes = dra.device_classes if dra is not None else None
    if not classes:
        return frozenset()
    names = {IMPLICIT_PREFIX + name for name in classes}
    names.update(dc.extended_resource_name for dc in classes.values() if dc.extended_resource_name)
    return frozenset(names)


def tolerated_classes(index: int, classes: set[str], ctx: Context) -> bool:
    """Whether toleration number `index` of gpu-tolerations is for devices of one of these
    GPU classes: by class name, by a driver the class requires, or by the plain resource name
    the class stands for (`extendedResourceName` matching the toleration's resources)."""
    names, drivers = ctx.rules.class_tolerations[index]
    _, resources = ctx.rules.tolerations[index]
    known = ctx.dra.device_classes if ctx.dra is not None else None
    for name in classes:
        if names.matches(name):
            return True
        found: DeviceClass | None = known.get(name) if known is not None else None
        if found is None:
            continue
        if any(drivers.matches(d) for d in found.drivers):
            return True
        if found.extended_resource_name and resources.match(found.extended_resource_name):
            return True
    return False
