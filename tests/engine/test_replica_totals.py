"""Every template's pods counted: replicas per template for the shipped kinds and declared
ones, quota advice on a controller's whole ask, and a gang job that could never fit refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tests.support.paths import SNAPSHOT
from tests.support.webhook import Webhook
from webhook.audit.html import object_gpus
from webhook.audit.manifests import Document
from webhook.audit.run import AuditResult, audit
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.podviews import pod_views
from webhook.engine.subject import subject_for
from webhook.engine.workloads import DEFAULT_TABLE, workload_table
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules
from webhook.ruleset.workloads import PodTemplatePath, WorkloadKind

GPU = "nvidia.com/gpu"


def template(gpus: int | None = None, name: str = "c") -> dict[str, Any]:
    resources = {"limits": {GPU: str(gpus)}} if gpus is not None else {}
    return {"spec": {"containers": [{"name": name, "image": "x", "resources": resources}]}}


def pytorchjob(master: int = 4, workers: int = 3, per_worker: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama", "namespace": "train"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template(master)},
                "Worker": {"replicas": workers, "template": template(per_worker)},
            }
        },
    }


def pods_per_template(obj: dict[str, Any], table: Any = DEFAULT_TABLE) -> dict[str, int]:
    group = obj["apiVersion"].rpartition("/")[0]
    views = pod_views(obj, group=group, kind=obj["kind"], is_gpu=lambda n: n == GPU, table=table)
    return {v.field_path: v.replicas for v in views}


# ---- how many pods each template stands for ------------------------------------------------


def test_kubeflow_roles_count_their_own_replicas_one_when_unsaid() -> None:
    job = pytorchjob()
    del job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"]
    assert pods_per_template(job) == {
        "spec.pytorchReplicaSpecs.Master.template.spec": 1,
        "spec.pytorchReplicaSpecs.Worker.template.spec": 3,
    }


def test_a_jobset_counts_replicas_times_parallelism_per_replicated_job() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 2,
                 "template": {"spec": {"parallelism": 4, "template": template(8)}}},
                {"name": "driver", "template": {"spec": {"template": template()}}},
            ]
        },
    }  # fmt: skip
    assert pods_per_template(jobset) == {
        "spec.replicatedJobs[0].template.spec.template.spec": 8,
        "spec.replicatedJobs[1].template.spec.template.spec": 1,
    }


@pytest.mark.parametrize("with_leader", [True, False])
def test_a_leader_worker_set_counts_groups_of_size_pods(with_leader: bool) -> None:
    lws: dict[str, Any] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "spec": {"replicas": 3, "leaderWorkerTemplate": {"size": 4, "workerTemplate": template(8)}},
    }
    if with_leader:
        lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = template(1)
        expected = {
            "spec.leaderWorkerTemplate.leaderTemplate.spec": 3,
            "spec.leaderWorkerTemplate.workerTemplate.spec": 9,
        }
    else:  # the leader is made from the worker template: size pods of it per group
        expected = {"spec.leaderWorkerTemplate.workerTemplate.spec": 12}
    assert pods_per_template(lws) == expected


def test_ray_worker_groups_count_replicas_then_min_replicas() -> None:
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "spec": {
            "headGroupSpec": {"template": template()},
            "workerGroupSpecs": [
                {"groupName": "a", "replicas": 4, "minReplicas": 1, "template": template(1)},
                {"groupName": "b", "minReplicas": 2, "template": template(1)},
                {"groupName": "c", "template": template(1)},
            ],
        },
    }
    assert pods_per_template(cluster) == {
        "spec.headGroupSpec.template.spec": 1,
        "spec.workerGroupSpecs[0].template.spec": 4,
        "spec.workerGroupSpecs[1].template.spec": 2,
        "spec.workerGroupSpecs[2].template.spec": 1,
    }


def test_volcano_tasks_count_their_replicas() -> None:
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "spec": {"tasks": [{"replicas": 6, "template": template(1)}, {"template": template()}]},
    }
    assert pods_per_template(job) == {
        "spec.tasks[0].template.spec": 6,
        "spec.tasks[1].template.spec": 1,
    }


def test_a_replica_count_that_is_no_count_reads_as_the_default() -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "three"
    assert pods_per_template(job)["spec.pytorchReplicaSpecs.Worker.template.spec"] == 1


def test_a_declared_kind_counts_replicas_per_template() -> None:
    kind = WorkloadKind.model_validate(
        {
            "group": "example.com",
            "kind": "Trainer",
            "resource": "trainers",
            "versions": ["v1"],
            "podTemplates": [
                "spec.launcher",
                {"path": "spec.roles[*].template", "replicas": ["spec.roles[*].count"]},
            ],
            "gang": True,
        }
    )
    table = workload_table([kind])
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Trainer",
        "spec": {
            "launcher": template(),
            "roles": [{"count": 5, "template": template(2)}, {"template": template(2)}],
        },
    }
    assert pods_per_template(obj, table) == {
        "spec.launcher.spec": 1,
        "spec.roles[0].template.spec": 5,
        "spec.roles[1].template.spec": 1,
    }


def test_a_replica_path_must_share_the_templates_wildcard() -> None:
    with pytest.raises(ValidationError, match="wildcard"):
        PodTemplatePath.model_validate(
            {"path": "spec.roles[*].template", "replicas": ["spec.other[*].count"]}
        )


# ---- quota on the whole ask ----------------------------------------------------------------


@pytest.fixture
def judge(tmp_path: Path) -> Any:
    snapshot = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {"train": {"labels": {}}, "capped": {"labels": {}}},
        "resourceQuotas": [
            {"namespace": "capped", "name": "gpu", "hard": {f"requests.{GPU}": "8"},
             "used": {f"requests.{GPU}": "0"}},
        ],
        "pods": [{"namespace": "train", "name": "running", "gpus": {GPU: 2}}],
    }  # fmt: skip
    (tmp_path / "snapshot.yaml").write_text(yaml.safe_dump(snapshot))
    facts = load_snapshot(tmp_path / "snapshot.yaml")
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    budgets = {"budgets": [{"name": "train", "namespaces": ["train"], "limits": {GPU: 8}}]}
    (rules_dir / "rules.yaml").write_text(yaml.safe_dump({"rules": {"gpu-quota": budgets}}))
    rules = compile_rules(load_rules(rules_dir))

    def decide(obj: dict[str, Any], namespace: str = "train") -> Any:
        subject = subject_for(obj, namespace=namespace)
        return evaluate(subject, rules, facts.facts_for(namespace), stage=Stage.ADMIT)

    return decide


def quota_texts(findings: Any) -> list[str]:
    return [f.summary for f in findings if f.rule == "gpu-quota"]


def test_a_gang_job_asking_more_than_its_budget_allows_at_all_is_refused(judge: Any) -> None:
    decision = judge(pytorchjob(master=4, workers=3, per_worker=8))
    assert not decision.allowed
    [summary] = quota_texts(decision.denials)
    assert "budget 'train' allows 8 nvidia.com/gpu in namespace train" in summary
    assert (
        "1 pod x 4 (spec.pytorchReplicaSpecs.Master) + 3 pods x 8 "
        "(spec.pytorchReplicaSpecs.Worker) = 28 at once" in summary
    )
    assert "could never start" in summary
    [fix] = [f.fix for f in decision.denials if f.rule == "gpu-quota"]
    assert "at most 8 nvidia.com/gpu in all" in fix


def test_a_gang_job_that_fits_the_budget_but_not_what_is_left_is_warned(judge: Any) -> None:
    decision = judge(pytorchjob(master=2, workers=3, per_worker=2))  # 8: the budget, 2 in use
    assert decision.allowed
    [summary] = quota_texts(decision.warnings)
    assert summary == (
        "gpu-quota: namespace train uses 2 of 8 nvidia.com/gpu; 1 pod x 2 "
        "(spec.pytorchReplicaSpecs.Master) + 3 pods x 2 (spec.pytorchReplicaSpecs.Worker) = 8"
    )


def test_a_gang_job_is_judged_against_a_resource_quota_too(judge: Any) -> None:
    decision = judge(pytorchjob(master=4, workers=1, per_worker=8), namespace="capped")
    assert not decision.allowed
    [summary] = quota_texts(decision.denials)
    assert summary.startswith(
        "gpu-quota: ResourceQuota gpu (requests.nvidia.com/gpu) allows 8 nvidia.com/gpu"
    )
    assert "= 12 at once" in summary


def test_a_job_within_its_budget_gets_no_quota_finding(judge: Any) -> None:
    decision = judge(pytorchjob(master=1, workers=2, per_worker=2))
    assert decision.allowed
    assert not quota_texts(decision.warnings) and not quota_texts(decision.denials)


def test_kinds_whose_pods_need_not_run_together_are_only_warned(judge: Any) -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "sweep"},
        "spec": {
            "replicatedJobs": [
                {"name": "trials", "replicas": 4,
                 "template": {"spec": {"parallelism": 2, "template": template(2)}}},
            ]
        },
    }  # fmt: skip
    decision = judge(jobset)
    assert decision.allowed
    [summary] = quota_texts(decision.warnings)
    assert summary == "gpu-quota: namespace train uses 2 of 8 nvidia.com/gpu; 8 pods x 2 = 16"


def test_a_controller_is_judged_once_for_all_its_templates(judge: Any) -> None:
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "ray"},
        "spec": {
            "headGroupSpec": {"template": template(2)},
            "workerGroupSpecs": [
                {"groupName": "a", "replicas": 2, "template": template(2)},
                {"groupName": "b", "replicas": 1, "template": template(1)},
            ],
        },
    }
    decision = judge(cluster)  # 2 + 4 + 1 = 7 with 2 in use: none of them alone is over
    assert decision.allowed
    assert quota_texts(decision.warnings) == [
        "gpu-quota: namespace train uses 2 of 8 nvidia.com/gpu; 1 pod x 2 "
        "(spec.headGroupSpec) + 2 pods x 2 (spec.workerGroupSpecs[0]) + 1 pod x 1 "
        "(spec.workerGroupSpecs[1]) = 7"
    ]


# ---- the audit's bars and the real server ----------------------------------------------------


def test_the_audit_report_bars_count_every_templates_pods() -> None:
    rules = compile_rules(load_rules(None))
    [result] = audit([Document(source="job.yaml#0", obj=pytorchjob())], rules)
    assert isinstance(result, AuditResult)
    assert object_gpus(result, rules) == {GPU: 28}


def test_a_gang_job_that_could_never_fit_is_denied_over_https(webhook_with: Any) -> None:
    hook: Webhook = webhook_with(
        {
            "gpu-quota": {
                "budgets": [{"name": "ml", "namespaces": ["ml-team"], "limits": {GPU: 16}}]
            }
        },
        args=("--cluster-snapshot", str(SNAPSHOT)),
    )
    job = pytorchjob(master=4, workers=3, per_worker=8)
    job["metadata"]["namespace"] = "ml-team"
    verdict = hook.admit(job, namespace="ml-team")[2]
    assert not verdict.allowed
    assert verdict.denied_rules == {"gpu-quota"}
    assert "= 28 at once" in verdict.message
