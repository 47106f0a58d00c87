"""Where pod specs live inside workload objects: one declaration per kind.

The kinds gpu-admission knows out of the box (`ruleset.shipped_workloads`) are declared with
the same model a rule file's `workloads:` section uses, so a platform team's CRD gets exactly
what a Deployment gets: every rule, the audit, and routing in the generated webhook
configuration. A rule file's declaration of a shipped kind (same group and kind) replaces the
shipped one.

Paths are dotted field names from the object's root. `name[*]` walks every item of a list,
a lone `*` every value of a map (Kubeflow's `pytorchReplicaSpecs: {Master: ..., Worker:
...}`). At most one wildcard per path: the webhooks' CEL routing has no flatten.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from webhook.modelerrors import Invalid
from webhook.ruleset.base import StrictModel

__all__ = [
    "LIST_ITEMS",
    "MAP_VALUES",
    "ContainerPath",
    "PodTemplatePath",
    "ReplicaFactor",
    "WorkloadKind",
    "parse_path",
]

LIST_ITEMS = "[*]"
MAP_VALUES = "*"
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESOURCE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_GROUP = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
_VERSION = r"^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$"
_PATH_FIX = "write a dotted path of field names, e.g. spec.template or spec.workers[*].template"


def parse_path(path: str) -> tuple[str, ...]:
    """'spec.tasks[*].template' -> ('spec', 'tasks', '[*]', 'template').

    Raises `Invalid` (a ValueError) naming the bad segment, so a rule file's typo fails at load.
    """
    if not path:
        raise Invalid("a path may not be empty", _PATH_FIX)
    out: list[str] = []
    for part in path.split("."):
        if part == MAP_VALUES:
            out.append(MAP_VALUES)
            continue
        name = part.removesuffix(LIST_ITEMS)
        if not _FIELD.fullmatch(name):
            raise Invalid(
                f"{path!r}: {part!r} is not a field name, name[*] (each list item) or * "
                "(each map value)",
                _PATH_FIX,
            )
        out.append(name)
        if part.endswith(LIST_ITEMS):
            out.append(LIST_ITEMS)
    if sum(s in (LIST_ITEMS, MAP_VALUES) for s in out) > 1:
        raise Invalid(
            f"{path!r}: at most one [*] or * per path (the webhooks' CEL routing cannot "
            "flatten nested lists)",
            "declare one path per outer item instead, e.g. spec.groups[*].template",
        )
    return tuple(out)


def _check_paths(paths: list[str]) -> list[str]:
    for i, p in enumerate(paths):
        try:
            parse_path(p)
        except Invalid as exc:
            raise exc.below(i) from None
    return paths


class ContainerPath(StrictModel):
    """A single container-like object outside any pod spec (Kubeflow Trainer's
    `spec.trainer`): its GPU asks are judged, nothing is added to it."""

    path: str = Field(examples=["spec.trainer"])
    # The key holding its ResourceRequirements (TrainJob: resourcesPerNode).
    resources: str = Field(default="resources", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # What messages call the container, as its controller names it: the string at `name`
    # (it may use the path's wildcard, read from the same item) followed by `nameSuffix` (the
    # NIM operator's `<NIMService name>-ctr`). Without one, or when it is absent (a
    # generateName), the container is named by its path, or by the kind in lower case when
    # the path is the whole `spec` (the object is the container).
    name: str | None = Field(default=None, examples=["metadata.name"])
    name_suffix: str = Field(default="", max_length=63, examples=["-ctr"])

    @model_validator(mode="after")
    def _paths(self) -> ContainerPath:
        try:
            own = _wildcard_prefix(parse_path(self.path))
        except Invalid as exc:
            raise exc.below("path") from None
        if self.name is not None:
            try:
                theirs = _wildcard_prefix(parse_path(self.name))
            except Invalid as exc:
                raise exc.below("name") from None
            if theirs is not None and theirs != own:
                raise Invalid(
                    f"{self.name!r}: a name path may use a wildcard only where the container "
                    f"path {self.path!r} has its own, to read the same item",
                    "use the container path's own wildcard in the name path, or none",
                    ("name",),
                )
        return self


def _wildcard_prefix(path: tuple[str, ...]) -> tuple[str, ...] | None:
    """The segments up to and including the path's wildcard; None when it has none."""
    for i, seg in enumerate(path):
        if seg in (LIST_ITEMS, MAP_VALUES):
            return path[: i + 1]
    return None


class ReplicaFactor(StrictModel):
    """One factor of how many pods a template stands for at once.

    The first of `path` present in the object (a list gives fallbacks: a Ray worker group's
    `replicas`, then its `minReplicas`), else `default`; less `minus` (a LeaderWorkerSet's
    workers per group are `size - 1`), and only when `minusIf` is present, if given (without
    a `leaderTemplate` the leader is made from the worker template too). A path may use the
    template's own wildcard: `spec.tasks[*].replicas` is read from the same task.
    """

    path: str | list[str] = Field(examples=["spec.replicas"])
    default: int = Field(default=1, ge=0)
    minus: int = Field(default=0, ge=0)
    minus_if: str | None = Field(
        default=None, examples=["spec.leaderWorkerTemplate.leaderTemplate"]
    )

    @property
    def paths(self) -> list[str]:
        return [self.path] if isinstance(self.path, str) else list(self.path)

    @model_validator(mode="after")
    def _parse(self) -> ReplicaFactor:
        if not self.paths:
            raise Invalid(
                "give at least one path", "write path: spec.replicas (or a list of them)", ("path",)
            )
        for i, p in enumerate(self.paths):
            try:
                parse_path(p)
            except Invalid as exc:
                raise exc.below("path", *(() if isinstance(self.path, str) else (i,))) from None
        if self.minus_if is not None:
            try:
                parse_path(self.minus_if)
            except Invalid as exc:
                raise exc.below("minusIf") from None
        return self


class PodTemplatePath(StrictModel):
    """A pod template and how many of its pods run at once: the product of `replicas`
    (Kubeflow `*ReplicaSpecs.<role>.replicas`; a JobSet's `replicas` x the Job's
    `parallelism`). Without `replicas`, the kind's own `replicas` path, else 1."""

    path: str = Field(examples=["spec.template"])
    replicas: list[str | ReplicaFactor] = Field(default_factory=list, examples=[["spec.replicas"]])
    # In a kind that `serves`, which containers take traffic (gpu-readiness-probe asks them
    # for a readinessProbe): "ports", those that declare ports; "main", its first container
    # too (KAITO's inference template: the model server, whatever it declares).
    serving: Literal["ports", "main"] = "ports"
    # When this path holds an object, the template makes only worker pods, which take no
    # traffic (a LeaderWorkerSet's workerTemplate beside a leaderTemplate; without one it
    # makes the leader too). It may use the template's own wildcard.
    workers_if: str | None = Field(
        default=None, examples=["spec.leaderWorkerTemplate.leaderTemplate"]
    )

    @model_validator(mode="after")
    def _same_wildcard(self) -> PodTemplatePath:
        try:
            own = _wildcard_prefix(parse_path(self.path))
        except Invalid as exc:
            raise exc.below("path") from None
        for i, factor in enumerate(self.factors()):
            for p in [*factor.paths, *([factor.minus_if] if factor.minus_if else [])]:
                theirs = _wildcard_prefix(parse_path(p))
                if theirs is not None and theirs != own:
                    raise Invalid(
                        f"{p!r}: a replica path may use a wildcard only where the template "
                        f"{self.path!r} has its own, to read the same item",
                        "use the template's own wildcard in the replica path, or none",
                        ("replicas", i),
                    )
        if self.workers_if is not None:
            try:
                theirs = _wildcard_prefix(parse_path(self.workers_if))
            except Invalid as exc:
                raise exc.below("workersIf") from None
            if theirs is not None and theirs != own:
                raise Invalid(
                    f"{self.workers_if!r}: workersIf may use a wildcard only where the template "
                    f"{self.path!r} has its own, to read the same item",
                    "use the template's own wildcard in workersIf, or none",
                    ("workersIf",),
                )
        return self

    def factors(self) -> list[ReplicaFactor]:
        return [ReplicaFactor(path=f) if isinstance(f, str) else f for f in self.replicas]


class WorkloadKind(StrictModel):
    """A kind whose objects carry pod specs: where they are, and how the webhook is told."""

    # API group ("" is the core group): a DNS subdomain, as the apiserver requires.
    group: str = Field(default="", pattern=_GROUP, max_length=253, examples=["example.com"])
    kind: str = Field(
        min_length=1, max_length=63, pattern=r"^[A-Z][A-Za-z0-9]*$", examples=["ModelServer"]
    )
    # plural, for webhook rules, audit
    resource: str = Field(pattern=_RESOURCE, max_length=63, examples=["modelservers"])
    versions: list[Annotated[str, Field(pattern=_VERSION)]] = Field(min_length=1, examples=[["v1"]])
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    pod_specs: list[str] = Field(default_factory=list)  # paths to a PodSpec
    # Paths to a PodTemplateSpec; an object also says how many pods each one makes.
    pod_templates: list[str | PodTemplatePath] = Field(
        default_factory=list, examples=[["spec.template"]]
    )
    containers: list[ContainerPath] = Field(default_factory=list)
    # Keys inside each pod spec holding one container (KServe's `model`, `pytorch`, ...).
    inline_containers: list[str] = Field(default_factory=list)
    # Path to how many pods of each template run at once (replicas, parallelism); else 1.
    replicas: str | None = None
    # false: judged only, never patched (the pods it creates are mutated when created).
    mutate: bool = True
    # false: the controller merges these pod specs over a base that brings its own /dev/shm
    # (KServe's LLMInferenceServiceConfig): a volume added here would replace it.
    shm: bool = True
    # true: a runtime other objects are merged into (KServe's ServingRuntime, Kubeflow's
    # TrainingRuntime): a container asking no GPU here may get one from the object merged in,
    # so it gets no NVIDIA_VISIBLE_DEVICES=void (which would hide that GPU), and a GPU
    # toleration without a GPU here is no mistake.
    runtime: bool = False
    # true: every pod of an object runs together or none does (a training job's workers wait
    # for each other), so an object asking more than a budget allows at all can never run and
    # is refused; false: only warned, its pods are judged one by one when created.
    gang: bool = False
    suspend: str | None = Field(
        default=None,
        examples=["spec.suspend"],
        description=(
            "Path to the boolean that holds the object's pods back while true (Kueue creates "
            "the jobs it queues suspended): a suspended object takes nothing of a GPU budget, "
            "and is judged against it when an update sets the field false."
        ),
    )
    ttl: str | None = Field(
        default=None,
        examples=["spec.ttlSecondsAfterFinished"],
        description="Path to its ttlSecondsAfterFinished, which gpu-spend sets when unset.",
    )
    deadline: str | None = Field(
        default=None,
        examples=["spec.activeDeadlineSeconds"],
        description=(
            "Path to its activeDeadlineSeconds, which gpu-spend sets when unset and caps."
        ),
    )
    # true: its pods are long-lived servers that take traffic (a Deployment, a
    # LeaderWorkerSet, a model server's CRD): gpu-readiness-probe asks their serving
    # containers for a readinessProbe. Batch and training kinds never take traffic.
    serves: bool = False

    _paths = field_validator("pod_specs")(_check_paths)

    @field_validator("pod_templates")
    @classmethod
    def _template_paths(cls, value: list[str | PodTemplatePath]) -> list[str | PodTemplatePath]:
        _check_paths([t if isinstance(t, str) else t.path for t in value])
        return value

    @field_validator("replicas", "suspend", "ttl", "deadline")
    @classmethod
    def _replicas_path(cls, value: str | None) -> str | None:
        if value is not None and any(s in (LIST_ITEMS, MAP_VALUES) for s in parse_path(value)):
            raise Invalid(
                f"{value!r}: a replica count or suspend flag is one field, no wildcard",
                "give the path of one field, e.g. spec.replicas; a template's own count goes "
                "in its podTemplates entry ({path, replicas})",
            )
        return value

    @model_validator(mode="after")
    def _has_pods(self) -> WorkloadKind:
        if not (self.pod_specs or self.pod_templates or self.containers):
            raise Invalid(
                f"{self.kind}: no podSpecs, podTemplates or containers say where its pods are",
                "say where its pods are, e.g. podTemplates: [spec.template]",
            )
        return self

    @property
    def key(self) -> tuple[str, str]:
        return self.group, self.kind

    def spec_paths(self) -> tuple[tuple[str, ...], ...]:
        """Every path to a pod spec: a template's spec sits under its `spec`."""
        return tuple(parse_path(p) for p in self.pod_specs) + tuple(
            (*parse_path(t if isinstance(t, str) else t.path), "spec") for t in self.pod_templates
        )

    def spec_replicas(self) -> tuple[tuple[ReplicaFactor, ...] | None, ...]:
        """For each of `spec_paths`, its own replica factors; None: the kind's `replicas`."""
        own = tuple(
            tuple(t.factors()) if isinstance(t, PodTemplatePath) and t.replicas else None
            for t in self.pod_templates
        )
        return (None,) * len(self.pod_specs) + own

    def spec_serving(self) -> tuple[tuple[str, str | None], ...]:
        """For each of `spec_paths`: which containers take traffic ("" none: the kind does
        not serve; "ports"; "main") and the path that makes it a worker template, if any."""
        if not self.serves:
            return (("", None),) * len(self.spec_paths())
        own = tuple(
            (t.serving, t.workers_if) if isinstance(t, PodTemplatePath) else ("ports", None)
            for t in self.pod_templates
        )
        return (("ports", None),) * len(self.pod_specs) + own
