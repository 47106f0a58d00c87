"""Which KServe serving runtime an InferenceService's pods are merged over (pure, no I/O).

KServe does not run `spec.predictor` as it is written: when the predictor names a model
(`spec.predictor.model`, or a framework shortcut such as `spec.predictor.pytorch`, which
KServe's defaulter turns into a model with that format), the controller merges the predictor
over a ServingRuntime or ClusterServingRuntime (pkg/controller/v1beta1/inferenceservice/
components/predictor.go): pod volumes by name, the model container over the runtime's
`kserve-container`, a `transformer-container` over the runtime's of that name, and
volumeMounts by mountPath. A predictor's `workerSpec` is merged over the runtime's workerSpec
the same way (its first container over `worker-container`). A predictor with only custom
`containers`, the transformer and the explainer use no runtime.

Which runtime, as KServe picks it (ModelSpec.GetSupportingRuntimes):

- `model.runtime` names one: the namespace's ServingRuntime of that name, else the
  ClusterServingRuntime.
- Otherwise auto-selection: enabled, single-model runtimes whose multi-node-ness (a
  workerSpec) matches the predictor's, that accept its protocol version (none listed: any),
  and list its `modelFormat` (name, and version when it gives one) with `autoSelect: true`.
  The namespace's runtimes come before the cluster's, and among them the highest `priority`
  for that format wins; ties go by protocol version and creation time, which a runtime
  edit can change, so every runtime tied at the top is a candidate here.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.engine.podviews import ContainerView, PodView
from webhook.facts.model import Facts, ServingRuntime, ServingRuntimes

__all__ = ["RuntimeMerge", "runtime_merge"]

PREDICTOR = "/spec/predictor"
WORKER = "/spec/predictor/workerSpec"
MODEL_CONTAINER = "kserve-container"
TRANSFORMER_CONTAINER = "transformer-container"
WORKER_CONTAINER = "worker-container"
# Framework shortcuts, in the order KServe's defaulter tries them; each becomes a model of
# the format of the same name.
SHORTCUTS = (
    "sklearn", "tensorflow", "xgboost", "pytorch", "triton", "onnx",
    "huggingface", "pmml", "lightgbm", "paddle",
)  # fmt: skip
# Defaulted to protocol v2 when they set none (KServe's defaulter); anything else is v1.
_V2_SHORTCUTS = frozenset({"triton", "onnx", "huggingface"})
_V2_FORMATS = frozenset({"triton", "vLLM"})


@dataclass(frozen=True, slots=True)
class RuntimeMerge:
    """A pod spec KServe merges over a runtime: the candidate runtimes, or why none is known."""

    runtimes: tuple[ServingRuntime, ...] | None  # None: cannot tell which
    why: str  # for a message, when `runtimes` is None
    worker: bool  # the predictor's workerSpec, merged over the runtime's workerSpec

    def counterpart(self, c: ContainerView) -> str | None:
        """The runtime container `c` is merged over; None when it is not merged."""
        if c.init or c.ephemeral:
            return None
        if self.worker:
            return WORKER_CONTAINER if c.slot == ("containers", 0) else None
        if len(c.slot) == 1:  # spec.predictor.model or a shortcut
            return MODEL_CONTAINER
        return TRANSFORMER_CONTAINER if c.name == TRANSFORMER_CONTAINER else None

    def provides_shm(self, runtime: ServingRuntime, container: str) -> bool:
        shm = runtime.worker_shm_containers if self.worker else runtime.shm_containers
        return container in shm

    def volume_names(self) -> frozenset[str]:
        """Volumes of every candidate: a name we add would replace one of them."""
        out: set[str] = set()
        for rt in self.runtimes or ():
            out |= rt.worker_volumes if self.worker else rt.volumes
        return frozenset(out)


def _model(spec: dict[str, object]) -> tuple[str, dict[str, object]] | None:
    """("model" or the shortcut's key, its object) of a predictor; None: custom containers."""
    for key in ("model", *SHORTCUTS):
        found = spec.get(key)
        if isinstance(found, dict):
            return key, found
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _supports(
    rt: ServingRuntime, name: str, version: str | None, protocol: str, multi_node: bool
) -> bool:
    if rt.disabled or rt.multi_model or rt.multi_node != multi_node:
        return False
    if rt.protocols and protocol not in rt.protocols:
        return False
    # KServe's labels: "mt:<name>" for each auto-selectable format, plus "mt:<name>:<version>"
    # when it states one; the model's is "mt:<name>[:<version>]".
    return any(
        f.auto_select and f.name == name and (version is None or f.version == version)
        for f in rt.formats
    )


def _top(runtimes: list[ServingRuntime], name: str) -> tuple[ServingRuntime, ...]:
    """Those KServe could put first: the highest priority for the format, when any has one."""
    ranked = [(rt.priority(name), rt) for rt in runtimes]
    best = max((p for p, _ in ranked if p is not None), default=None)
    return tuple(rt for p, rt in ranked if p == best)


def _auto_selected(
    known: ServingRuntimes, key: str, model: dict[str, object], multi_node: bool
) -> tuple[tuple[ServingRuntime, ...] | None, str]:
    fmt = model.get("modelFormat") if key == "model" else {"name": key}
    name = _text(fmt.get("name")) if isinstance(fmt, dict) else None
    if name is None:
        return None, "no modelFormat"
    version = _text(fmt.get("version")) if isinstance(fmt, dict) else None
    protocol = _text(model.get("protocolVersion"))
    if protocol is None:
        v2 = key in _V2_SHORTCUTS or (key == "model" and name in _V2_FORMATS)
        protocol = "v2" if v2 else "v1"
    for scope in (known.namespaced, known.cluster):  # the namespace's runtimes come first
        fit = [rt for rt in scope.values() if _supports(rt, name, version, protocol, multi_node)]
        if fit:
            return _top(fit, name), ""
    shown = name + (f" version {version}" if version else "")
    return None, f"no runtime auto-selects format {shown!r}"


def runtime_merge(pod: PodView, facts: Facts | None) -> RuntimeMerge | None:
    """How KServe merges this pod spec over a runtime; None when it does not."""
    if pod.kind != "InferenceService" or pod.pointer not in (PREDICTOR, WORKER):
        return None
    worker = pod.pointer == WORKER
    found = None if worker else _model(pod.spec)
    if not worker and found is None:
        return None  # custom containers only: the predictor is the whole pod
    known = facts.serving_runtimes if facts is not None else None
    if known is None:
        why = "no cluster facts" if facts is None else "runtimes unknown"
        return RuntimeMerge(None, why, worker)
    if found is None:
        # The workerSpec alone does not say the model: any multi-node runtime may be the one.
        every = [*known.namespaced.values(), *known.cluster.values()]
        multi = tuple(rt for rt in every if rt.multi_node and not rt.disabled)
        return RuntimeMerge(multi or None, "no runtime has a workerSpec", worker)
    key, model = found
    named = _text(model.get("runtime")) if key == "model" else None
    if named is not None:
        runtime = known.namespaced.get(named) or known.cluster.get(named)
        if runtime is None:
            return RuntimeMerge(None, f"runtime {named!r} not found", worker)
        return RuntimeMerge((runtime,), "", worker)
    multi_node = pod.spec.get("workerSpec") is not None
    runtimes, why = _auto_selected(known, key, model, multi_node)
    return RuntimeMerge(runtimes, why, worker)
