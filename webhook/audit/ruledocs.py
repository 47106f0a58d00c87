"""What each rule is for, in a sentence and a paragraph: the rule descriptions code-scanning
reports (SARIF) show beside every result.

The rule-set models say how a rule is configured, not why it exists, so the words live here;
a test holds this table to the rule ids the rule set knows.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UNREADABLE_RULE", "RuleDoc", "known_rules", "rule_doc"]

# The pseudo-rule of an object with a field of a type no Kubernetes object has there.
UNREADABLE_RULE = "unreadable-object"


@dataclass(frozen=True, slots=True)
class RuleDoc:
    short: str  # one line, what the rule checks
    help: str  # what goes wrong without it and what to do


_DOCS: dict[str, RuleDoc] = {
    "gpu-requests-limits": RuleDoc(
        "GPU requests equal GPU limits",
        "GPUs cannot be overcommitted: the apiserver refuses GPU requests that differ from "
        "limits. A GPU only in requests is copied to limits (or refused with fix: false); "
        "set the same number in both, or only in limits.",
    ),
    "gpu-whole-quantity": RuleDoc(
        "GPU quantities are whole numbers",
        "0.5 or 500m of a GPU does not exist: the device plugin hands out whole devices. Ask "
        "for a whole number, or for a MIG profile or time-sliced resource the cluster offers.",
    ),
    "gpu-mig-mixed": RuleDoc(
        "No container mixes MIG slices and whole GPUs",
        "The device plugin cannot give one container both MIG slices and whole GPUs. Ask for "
        "one kind per container.",
    ),
    "gpu-tolerations": RuleDoc(
        "GPU pods tolerate the GPU node taint",
        "GPU nodes are tainted so that only GPU pods land there; the webhook adds the matching "
        "toleration to GPU pods that have none.",
    ),
    "gpu-shm": RuleDoc(
        "GPU containers get a memory-backed /dev/shm",
        "NCCL and PyTorch data loaders need far more shared memory than the 64Mi default. The "
        "webhook mounts a memory-backed emptyDir at /dev/shm, sized from the container's "
        "memory limit, where none is mounted; it reports when it cannot tell whether a "
        "serving runtime brings its own.",
    ),
    "gpu-probe-delays": RuleDoc(
        "Probes of GPU containers allow for model loading",
        "Model loading takes minutes; probes tuned for a web app restart GPU servers while they "
        "load. The webhook raises probe delays to the configured minimums, or adds a "
        "startupProbe.",
    ),
    "visible-devices": RuleDoc(
        "NVIDIA_VISIBLE_DEVICES is not set by hand",
        "With the NVIDIA container toolkit, NVIDIA_VISIBLE_DEVICES (set directly, through "
        "valueFrom or envFrom, or left to a CUDA image) exposes GPUs the pod was not given. "
        "Ask for GPUs through resources; the webhook sets it to void in containers that ask "
        "for none.",
    ),
    "privileged-gpu": RuleDoc(
        "No privileged containers in pods that can reach GPU nodes",
        "A privileged container sees every device node of its node, so every GPU. Drop "
        "privileged and ask for the GPUs the workload needs.",
    ),
    "host-gpu-devices": RuleDoc(
        "No hostPath mounts that reach GPUs",
        "A hostPath volume that holds GPU device nodes (/dev, /dev/nvidia*, /dev/dri), reaches "
        "the host's root (/proc, /proc/1/root), the GPUs' sysfs (/sys) or a container runtime "
        "socket reaches GPUs without an allocation. Remove the volume and ask for GPUs through "
        "resources.",
    ),
    "gpu-toleration-without-gpu": RuleDoc(
        "Pods that ask for no GPU do not tolerate the GPU taint",
        "A pod that tolerates the GPU taint but asks for no GPU takes CPU and memory on GPU "
        "nodes that GPU pods then cannot use. Remove the toleration.",
    ),
    "gpu-memory-limit": RuleDoc(
        "GPU containers set a memory limit",
        "Without a memory limit a runaway process can starve the other GPU pods on the node. "
        "Set resources.limits.memory.",
    ),
    "gpu-readiness-probe": RuleDoc(
        "GPU serving containers have a readiness probe",
        "A serving container without a readiness probe gets traffic before its model is "
        "loaded. Only containers that serve are asked: they declare ports, or are a serving "
        "kind's model server; never LeaderWorkerSet workers, batch pods or a container that "
        "declares no port. Add a readinessProbe.",
    ),
    "gpu-init-container": RuleDoc(
        "Init containers ask for no GPU",
        "GPUs asked by an init container are held for the pod's whole life. Move the GPU work "
        "into a regular container.",
    ),
    "gpu-quota": RuleDoc(
        "GPU pods fit their namespace's GPU budget",
        "Usage plus this request must stay within the namespace's GPU budget, per resource and "
        "per GPU product; native ResourceQuota refusals are named early. Needs cluster facts.",
    ),
    "gpu-priority-class": RuleDoc(
        "GPU pods use an allowed, existing priority class",
        "GPU pods run at a priority the platform chose: a class from the namespace's allowed "
        "list that exists, never a system-* class. Needs cluster facts.",
    ),
    "gpu-schedulable": RuleDoc(
        "GPU pods could be scheduled on some node",
        "More GPUs than the largest node offers, a GPU product or MIG profile no node has, or "
        "more than one of a time-sliced resource: the pod would stay Pending forever. Needs "
        "cluster facts.",
    ),
    "gpu-queue": RuleDoc(
        "GPU workloads go through a batch queue that can admit them",
        "Off by default. A GPU workload names a Kueue LocalQueue or KAI queue that exists (or "
        "gets the namespace's default LocalQueue), whose ClusterQueue covers the GPUs asked and "
        "could ever give them all. Needs cluster facts.",
    ),
    "gpu-spend": RuleDoc(
        "One GPU workload takes a bounded share, for a bounded time",
        "At most maxPerPod GPUs per pod and maxPerWorkload per workload (every template and "
        "replica at once), below the budget; GPU jobs get ttlSecondsAfterFinished and "
        "activeDeadlineSeconds when they set none, and a deadline above the maximum is "
        "refused. Nothing applies until a setting says so.",
    ),
    UNREADABLE_RULE: RuleDoc(
        "Objects are readable as Kubernetes objects",
        "A field has a type no Kubernetes object can have there (a string where a list "
        "belongs, ...): the apiserver would refuse it too. Fix the field the message names.",
    ),
}


def rule_doc(rule: str) -> RuleDoc:
    """The description of `rule`; a rule this table does not know still gets a line."""
    return _DOCS.get(rule) or RuleDoc(rule, f"See the {rule} rule in the rule files.")


def known_rules() -> tuple[str, ...]:
    return tuple(_DOCS)
