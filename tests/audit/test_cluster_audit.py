"""`audit --cluster`: the workloads of a live cluster, read once through a kubeconfig."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import deployment, gpu_pod, seed
from tests.support.fake_apiserver import FakeApiServer
from tests.support.paths import ROOT
from webhook.audit.cluster import bounded


@pytest.fixture
def cluster(tmp_path: Path, server: FakeApiServer) -> Path:
    seed(server)  # 7 running GPU pods in ml-team, a ResourceQuota of 16
    server.put("deployments", deployment("good", "1"))
    server.put("deployments", deployment("half", "0.5"))
    owned = gpu_pod("good-abc-1")
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "good-abc",
            "uid": "u",
            "controller": True,
        }
    ]
    server.put("pods", owned)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(server.kubeconfig())
    return kubeconfig


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "audit", "--rules", str(ROOT / "rules"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_a_live_cluster_is_audited_like_manifests(cluster: Path) -> None:
    result = run("--cluster", "--kubeconfig", str(cluster), "-o", "json")
    assert result.returncode == 1, result.stderr  # the half-GPU Deployment
    doc = json.loads(result.stdout)
    by_name = {r["name"]: r for r in doc["results"]}
    assert not by_name["half"]["allowed"]
    assert by_name["good"]["allowed"]
    assert "good-abc-1" not in by_name  # judged through its controller
    assert doc["notChecked"] == []  # the cluster supplied the facts
    assert doc["summary"]["objects"] == len(doc["results"])


def test_the_table_ends_with_gpu_use_against_quota(cluster: Path) -> None:
    result = run("--cluster", "--kubeconfig", str(cluster), "--namespace", "ml-team")
    assert result.returncode == 1
    assert "ml-team: in use nvidia.com/gpu=8; quota requests.nvidia.com/gpu=16" in result.stdout


def test_an_unreachable_cluster_is_an_input_error(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(FakeApiServer().kubeconfig().replace(":0", ":9"))  # nothing listens
    result = run("--cluster", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 2
    assert "cannot read the cluster" in result.stderr


def test_policy_reports_are_written_and_rewritten(cluster: Path, server: FakeApiServer) -> None:
    for _ in range(2):  # the second run replaces what the first created
        result = run("--cluster", "--kubeconfig", str(cluster), "-o", "json", "--write-reports")
        assert result.returncode == 1, result.stderr
        assert "wrote 1 PolicyReports" in result.stderr
    report = server.objects["policyreports"][("ml-team", "gpu-admission")]
    assert report["kind"] == "PolicyReport"
    assert report["summary"]["fail"] == 1
    assert any(
        r["rule"] == "gpu-whole-quantity" and r["result"] == "fail" for r in report["results"]
    )


def test_a_report_too_big_to_store_keeps_failures_first() -> None:
    results = [{"result": "pass", "policy": "p"}] * 1500 + [{"result": "fail", "policy": "p"}] * 3
    report = {"metadata": {"name": "r", "namespace": "n"}, "results": results}
    small = bounded(report, limit=1000)
    assert len(small["results"]) == 1000
    assert [r["result"] for r in small["results"][:3]] == ["fail"] * 3
    assert small["metadata"]["annotations"]["gpu-admission.io/results-dropped"] == "503"


def _runtime(name: str, gpus: str, ns: str | None = "ml-team") -> dict[str, Any]:
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    container = {
        "name": "kserve-container",
        "image": "vllm/vllm-openai:v0.8.5",
        "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "24Gi"}},
    }
    return {"metadata": meta, "spec": {"supportedModelFormats": [{"name": "vllm"}],
                                       "containers": [container]}}  # fmt: skip


def test_crd_workload_kinds_the_cluster_serves_are_audited_in_a_served_version(
    cluster: Path, server: FakeApiServer
) -> None:
    # ServingRuntimes are served by the fake apiserver; RayClusters, TrainJobs... answer 404,
    # as on a cluster without those CRDs, and are skipped without failing the audit.
    server.put("servingruntimes", _runtime("half-runtime", "0.5"))
    server.put("clusterservingruntimes", _runtime("shared-runtime", "1", ns=None))
    mpi = {
        "metadata": {"name": "half-mpi", "namespace": "ml-team"},
        "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {
            "containers": [{"name": "w", "image": "mpi:1",
                            "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}}}}},
    }  # fmt: skip
    server.put("mpijobs", mpi)  # served as v2beta1 only: found after v1 answers 404
    result = run("--cluster", "--kubeconfig", str(cluster), "-o", "json")
    assert result.returncode == 1, result.stderr
    by_name = {r["name"]: r for r in json.loads(result.stdout)["results"]}
    assert by_name["half-runtime"]["kind"] == "ServingRuntime"
    assert not by_name["half-runtime"]["allowed"]
    assert by_name["shared-runtime"]["kind"] == "ClusterServingRuntime"
    assert by_name["shared-runtime"]["namespace"] == ""  # judged under no namespace's rules
    assert by_name["shared-runtime"]["allowed"]
    assert by_name["half-mpi"]["kind"] == "MPIJob" and not by_name["half-mpi"]["allowed"]
    # Limited to one namespace: a cluster-scoped runtime belongs to none.
    result = run("--cluster", "--kubeconfig", str(cluster), "-o", "json", "--namespace", "ml-team")
    names = {r["name"] for r in json.loads(result.stdout)["results"]}
    assert "half-runtime" in names and "shared-runtime" not in names


@pytest.mark.parametrize("fail_on", ["deny", "warn"])
def test_cluster_junit_agrees_with_the_exit_code(
    cluster: Path, server: FakeApiServer, fail_on: str
) -> None:
    lean = deployment("lean", "1")  # a GPU and no memory limit: warned, not denied
    del lean["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    server.put("deployments", lean)
    junit = run("--cluster", "--kubeconfig", str(cluster), "-o", "junit", "--fail-on", fail_on)
    root = ET.fromstring(junit.stdout)
    failures = int(root.get("failures", "0"))
    assert junit.returncode == (1 if failures else 0)
    failed = {
        c.get("name", "").split()[0] for c in root.iter("testcase") if c.find("failure") is not None
    }
    doc = json.loads(run("--cluster", "--kubeconfig", str(cluster), "-o", "json").stdout)
    verdicts = ("deny", "warn") if fail_on == "warn" else ("deny",)
    failing = {
        f"{r['kind']}/{r['name']}"
        for r in doc["results"]
        if not r["allowed"] or any(f["verdict"] in verdicts for f in r["findings"])
    }
    assert failed == failing and "Deployment/half" in failed
    assert ("Deployment/lean" in failed) is (fail_on == "warn")
    # Live objects come from no file: suites are namespaces, cases carry no file or line.
    assert {s.get("name") for s in root.iter("testsuite")} == {"namespace ml-team"}
    assert all(c.get("file") is None for c in root.iter("testcase"))


def test_the_cluster_summary_counts_like_every_other_output(
    cluster: Path, server: FakeApiServer
) -> None:
    lean = deployment("lean", "1")
    del lean["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    server.put("deployments", lean)
    table = run("--cluster", "--kubeconfig", str(cluster), "--namespace", "ml-team").stdout
    doc = json.loads(
        run(
            "--cluster", "--kubeconfig", str(cluster), "--namespace", "ml-team", "-o", "json"
        ).stdout
    )
    s = doc["summary"]
    assert s["objects"] == s["allowed"] + s["denied"] and s["denied"] and s["warned"]
    words = (
        f"{s['objects']} objects: {s['allowed']} allowed + {s['denied']} denied; "
        f"of these {s['warned']} warned, {s['mutated']} would be mutated"
    )
    # The totals line and the namespace's line (all objects are in ml-team) say the same.
    assert table.count(words) == 2, table
    assert all(r["location"] is None for r in doc["results"])


def test_a_refused_cluster_read_is_told_in_the_apiservers_one_line() -> None:
    from kubernetes.client.exceptions import ApiException

    from webhook.audit.cli import api_reason

    exc = ApiException(status=403, reason="Forbidden")
    exc.body = (
        '{"kind":"Status","message":"deployments.apps is forbidden: User \\"bob\\" cannot list '
        'resource \\"deployments\\"","reason":"Forbidden","code":403}'
    )
    said = api_reason(exc)
    assert said == (
        '403 Forbidden: deployments.apps is forbidden: User "bob" cannot list resource '
        '"deployments"'
    )
    assert "\n" not in api_reason(RuntimeError("first line\nsecond line"))
