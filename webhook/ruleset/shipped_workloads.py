"""The workload kinds gpu-admission knows out of the box, declared with the model a rule
file's `workloads:` section uses (`ruleset.workloads`); a rule file's declaration of one of
them (same group and kind) replaces it.

Paths and replica factors come from each project's own CRD types. Kinds whose pods come only
from kinds listed here (a RoleBasedGroupSet's RoleBasedGroups, a VLLMRuntime's Deployment)
need no entry: what they make is judged. docs/gpu-pods.md lists both.
"""

from __future__ import annotations

from webhook.ruleset.workloads import WorkloadKind

__all__ = ["BUILTIN_WORKLOADS"]


def _kind(
    group: str, kind: str, resource: str, versions: list[str], **paths: object
) -> WorkloadKind:
    return WorkloadKind.model_validate(
        {"group": group, "kind": kind, "resource": resource, "versions": versions, **paths}
    )


_KSERVE_INLINE = [
    "model", "tensorflow", "pytorch", "sklearn", "xgboost", "onnx", "triton",
    "lightgbm", "pmml", "paddle", "huggingface",
]  # fmt: skip


def _ray(prefix: str) -> list[object]:
    """One head, and each worker group's `replicas` (else `minReplicas`, else 1)."""
    workers = f"{prefix}workerGroupSpecs[*]"
    return [
        f"{prefix}headGroupSpec.template",
        {
            "path": f"{workers}.template",
            "replicas": [{"path": [f"{workers}.replicas", f"{workers}.minReplicas"]}],
        },
    ]


def _leader_workers(prefix: str, *groups: str) -> list[object]:
    """A LeaderWorkerSet spec at `prefix`: `groups` (the product of those counts) of one
    leader and `size` - 1 workers; without a leader template the worker template makes the
    leader too, so it then counts `size` pods and serves."""
    lwt = f"{prefix}leaderWorkerTemplate"
    leader = f"{lwt}.leaderTemplate"
    return [
        {"path": leader, "replicas": list(groups)},
        {"path": f"{lwt}.workerTemplate",
         "replicas": [*groups, {"path": f"{lwt}.size", "minus": 1, "minusIf": leader}],
         "workersIf": leader},
    ]  # fmt: skip


def _rbg_roles() -> list[object]:
    """SGLang's RoleBasedGroup: `replicas` instances of each role, of one pod or of `size`
    pods (v1alpha1 `template` with a `leaderWorkerSet`; v1alpha2 `standalonePattern` or
    `leaderWorkerPattern`), made from one template that the leader's and workers' patches are
    laid over. Reusable `roleTemplates` are judged once each; the heterogeneous `components`
    (a list inside the list of roles) in the instances' pods."""
    role = "spec.roles[*]"
    return [
        {"path": f"{role}.template",
         "replicas": [f"{role}.replicas", f"{role}.leaderWorkerSet.size"]},
        {"path": f"{role}.standalonePattern.template", "replicas": [f"{role}.replicas"]},
        {"path": f"{role}.leaderWorkerPattern.template",
         "replicas": [f"{role}.replicas", f"{role}.leaderWorkerPattern.size"]},
        "spec.roleTemplates[*].template",
    ]  # fmt: skip


def _replicas(field: str) -> dict[str, object]:
    """Kubeflow's replica specs: each role's pods, `replicas` of them (1 when unsaid), all
    running together."""
    template = {"path": f"spec.{field}.*.template", "replicas": [f"spec.{field}.*.replicas"]}
    return {
        "podTemplates": [template],
        "gang": True,
        "suspend": "spec.runPolicy.suspend",
        "ttl": "spec.runPolicy.ttlSecondsAfterFinished",
        "deadline": "spec.runPolicy.activeDeadlineSeconds",
    }


_TEMPLATE = {"podTemplates": ["spec.template"]}
_SERVED = {**_TEMPLATE, "replicas": "spec.replicas", "serves": True}

# The kinds known out of the box. The group matters: Volcano's batch.volcano.sh Job is not a
# batch/v1 Job. Order is the order of the generated webhook rules.
BUILTIN_WORKLOADS: tuple[WorkloadKind, ...] = (
    _kind("", "Pod", "pods", ["v1"], podSpecs=["spec"], serves=True),
    _kind("", "PodTemplate", "podtemplates", ["v1"], podTemplates=["template"], serves=True),
    _kind("", "ReplicationController", "replicationcontrollers", ["v1"], **_TEMPLATE,
          replicas="spec.replicas", serves=True),
    _kind("apps", "Deployment", "deployments", ["v1"], **_SERVED),
    _kind("apps", "StatefulSet", "statefulsets", ["v1"], **_SERVED),
    _kind("apps", "DaemonSet", "daemonsets", ["v1"], **_TEMPLATE),
    _kind("apps", "ReplicaSet", "replicasets", ["v1"], **_SERVED),
    _kind("batch", "Job", "jobs", ["v1"], **_TEMPLATE, replicas="spec.parallelism",
          suspend="spec.suspend", ttl="spec.ttlSecondsAfterFinished",
          deadline="spec.activeDeadlineSeconds"),
    _kind("batch", "CronJob", "cronjobs", ["v1"], podTemplates=["spec.jobTemplate.spec.template"],
          replicas="spec.jobTemplate.spec.parallelism"),
    _kind("ray.io", "RayCluster", "rayclusters", ["v1"], podTemplates=_ray("spec."),
          suspend="spec.suspend"),
    _kind("ray.io", "RayJob", "rayjobs", ["v1"],
          podTemplates=[*_ray("spec.rayClusterSpec."), "spec.submitterPodTemplate"],
          suspend="spec.suspend", ttl="spec.ttlSecondsAfterFinished",
          deadline="spec.activeDeadlineSeconds"),
    _kind("ray.io", "RayService", "rayservices", ["v1"],
          podTemplates=_ray("spec.rayClusterConfig.")),
    _kind("kubeflow.org", "PyTorchJob", "pytorchjobs", ["v1"], **_replicas("pytorchReplicaSpecs")),
    _kind("kubeflow.org", "TFJob", "tfjobs", ["v1"], **_replicas("tfReplicaSpecs")),
    _kind("kubeflow.org", "MPIJob", "mpijobs", ["v1", "v2beta1"], **_replicas("mpiReplicaSpecs")),
    _kind("kubeflow.org", "XGBoostJob", "xgboostjobs", ["v1"], **_replicas("xgbReplicaSpecs")),
    _kind("kubeflow.org", "PaddleJob", "paddlejobs", ["v1"], **_replicas("paddleReplicaSpecs")),
    _kind("kubeflow.org", "JAXJob", "jaxjobs", ["v1"], **_replicas("jaxReplicaSpecs")),
    # Kubeflow Trainer v2: the runtimes hold the JobSet template the pods come from; a TrainJob
    # states the trainer's resources per node, judged but not patched (its pods are, when
    # created, and the runtime is). A TrainJob's resources and a predictor's model container
    # are merged into the runtimes' containers: those get no NVIDIA_VISIBLE_DEVICES=void.
    _kind("trainer.kubeflow.org", "TrainingRuntime", "trainingruntimes", ["v1alpha1"],
          podTemplates=["spec.template.spec.replicatedJobs[*].template.spec.template"],
          runtime=True),
    _kind("trainer.kubeflow.org", "ClusterTrainingRuntime", "clustertrainingruntimes",
          ["v1alpha1"], scope="Cluster",
          podTemplates=["spec.template.spec.replicatedJobs[*].template.spec.template"],
          runtime=True),
    _kind("trainer.kubeflow.org", "TrainJob", "trainjobs", ["v1alpha1"],
          containers=[{"path": "spec.trainer", "resources": "resourcesPerNode"}],
          replicas="spec.trainer.numNodes", mutate=False, gang=True, suspend="spec.suspend"),
    # KServe inlines the pod spec into each component (containers, volumes, tolerations...);
    # a multi-node predictor has a workerSpec, a pod spec too.
    _kind("serving.kserve.io", "InferenceService", "inferenceservices", ["v1beta1"],
          podSpecs=["spec.predictor", "spec.predictor.workerSpec", "spec.transformer",
                    "spec.explainer"],
          inlineContainers=_KSERVE_INLINE),
    _kind("serving.kserve.io", "ServingRuntime", "servingruntimes", ["v1alpha1"],
          podSpecs=["spec", "spec.workerSpec"], runtime=True),
    _kind("serving.kserve.io", "ClusterServingRuntime", "clusterservingruntimes", ["v1alpha1"],
          scope="Cluster", podSpecs=["spec", "spec.workerSpec"], runtime=True),
    # LLMInferenceService pod specs are merged over LLMInferenceServiceConfig templates that
    # mount their own /dev/shm: a volume added here would replace it.
    _kind("serving.kserve.io", "LLMInferenceService", "llminferenceservices",
          ["v1alpha1", "v1alpha2"],
          podSpecs=["spec.template", "spec.worker", "spec.prefill.template", "spec.prefill.worker",
                    "spec.router.scheduler.template"],
          replicas="spec.replicas", shm=False),
    # Each replicated Job runs `replicas` Jobs of `parallelism` pods.
    _kind("jobset.x-k8s.io", "JobSet", "jobsets", ["v1alpha2"],
          podTemplates=[{"path": "spec.replicatedJobs[*].template.spec.template",
                         "replicas": ["spec.replicatedJobs[*].replicas",
                                      "spec.replicatedJobs[*].template.spec.parallelism"]}],
          suspend="spec.suspend", ttl="spec.ttlSecondsAfterFinished"),
    # `replicas` groups of `size` pods: one leader (from the worker template when there is
    # no leader template) and size - 1 workers. A group is all-or-nothing, the object is not.
    # The workers take no traffic when a leader template makes the leader.
    _kind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", ["v1"],
          podTemplates=_leader_workers("spec.", "spec.replicas"), replicas="spec.replicas",
          serves=True),
    # LWS's DisaggregatedSet: each role is a LeaderWorkerSet spec, the whole set of roles
    # repeated `slices` times.
    _kind("disaggregatedset.x-k8s.io", "DisaggregatedSet", "disaggregatedsets", ["v1"],
          podTemplates=_leader_workers("spec.roles[*].spec.", "spec.roles[*].spec.replicas",
                                       "spec.slices"),
          serves=True),
    # A gang of minAvailable pods, which may be fewer than all tasks' replicas: warned only.
    _kind("batch.volcano.sh", "Job", "jobs", ["v1alpha1"],
          podTemplates=[{"path": "spec.tasks[*].template",
                         "replicas": ["spec.tasks[*].replicas"]}]),
    # NVIDIA NIM Operator: a NIMService's spec is one container-like object (image, env,
    # resources) plus placement; the operator makes Deployments or LeaderWorkerSets of it, and
    # their pods get the mutations when created.
    # The operator names the container `<NIMService name>-ctr`; a pipeline's services are
    # NIMServices named by each service's `name`.
    _kind("apps.nvidia.com", "NIMService", "nimservices", ["v1alpha1"],
          containers=[{"path": "spec", "name": "metadata.name", "nameSuffix": "-ctr"}],
          replicas="spec.replicas", mutate=False),
    _kind("apps.nvidia.com", "NIMPipeline", "nimpipelines", ["v1alpha1"],
          containers=[{"path": "spec.services[*].spec", "name": "spec.services[*].name",
                       "nameSuffix": "-ctr"}],
          mutate=False),
    # SGLang's RoleBasedGroup (v1alpha1: a role's own template; v1alpha2: a pattern's; both
    # served). A RoleBasedGroupSet makes RoleBasedGroups of its template: judged there.
    _kind("workloads.x-k8s.io", "RoleBasedGroup", "rolebasedgroups", ["v1alpha1", "v1alpha2"],
          podTemplates=_rbg_roles(),
          serves=True),
    # KAITO: a Workspace's custom inference template runs on `resource.count` GPU nodes (its
    # StatefulSet's replicas); an InferenceSet makes `replicas` Workspaces of its template. The
    # template's first container is the model server. A preset (no template) is rendered by
    # KAITO into a StatefulSet or Deployment, judged when created.
    _kind("kaito.sh", "Workspace", "workspaces", ["v1alpha1", "v1beta1"],
          podTemplates=[{"path": "inference.template", "replicas": ["resource.count"],
                         "serving": "main"}],
          serves=True),
    _kind("kaito.sh", "InferenceSet", "inferencesets", ["v1alpha1", "v1beta1"],
          podTemplates=[{"path": "spec.template.inference.template", "replicas": ["spec.replicas"],
                         "serving": "main"}],
          serves=True),
)  # fmt: skip
