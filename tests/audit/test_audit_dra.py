"""`audit` of manifest files judges DRA workloads as the webhook will after `kubectl apply -f`
of the whole run: the DeviceClasses, ResourceClaimTemplates and ResourceClaims found in the
files are facts for the other documents, whatever their order, in their own namespace, laid
over a snapshot's. A claim still not known is never voided and is named in a warning."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import ROOT

NS = "ml"
AUDIT = (sys.executable, "-m", "webhook", "audit", "--rules", str(ROOT / "rules"), "-o", "json")
VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def _deployment(template: str = "h100", namespace: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                            "resources": {
                                "limits": {"memory": "64Gi"},
                                "claims": [{"name": "gpu"}],
                            },
                            "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                        },
                        {"name": "logs", "image": "fluent/fluent-bit:3.0"},
                    ],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                    # tolerates the GPU taint: it can reach GPU nodes whatever its claim is
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            },
        },
    }


def _template(device_class: str, name: str = "h100", namespace: str | None = NS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


def _device_class(name: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
    }


def _audit(tmp_path: Path, *files: list[dict[str, Any]], args: tuple[str, ...] = ()) -> Any:
    paths = []
    for i, docs in enumerate(files):
        path = tmp_path / f"f{i}.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        paths.append(str(path))
    done = subprocess.run(
        [*AUDIT, *args, *paths],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    results = [r for r in json.loads(done.stdout)["results"] if r["kind"] == "Deployment"]
    assert len(results) == 1
    return results[0]


def _env_ops(result: Any) -> list[Any]:
    return [p["value"] for p in result["patch"] if p["path"].endswith("/env")]


def _is_gpu_workload(result: Any) -> bool:
    """Judged as a GPU workload: the trainer gets /dev/shm, only the log shipper gets void."""
    paths = [p["path"] for p in result["patch"]]
    return (
        "/spec/template/spec/containers/0/volumeMounts" in paths
        and "/spec/template/spec/containers/1/env" in paths
        and "/spec/template/spec/containers/0/env" not in paths
    )


def _unresolved(result: Any) -> list[str]:
    return [
        f["message"]
        for f in result["findings"]
        if f["rule"] == "visible-devices" and "not known" in f["message"]
    ]


def test_a_template_and_class_in_the_same_file_make_a_gpu_workload_in_any_order(
    tmp_path: Path,
) -> None:
    docs = [
        _deployment(),
        _template("h100-training"),
        _device_class("h100-training", "gpu.nvidia.com"),
    ]
    for order in (docs, docs[::-1]):
        result = _audit(tmp_path, order)
        assert _is_gpu_workload(result), result
        assert not _unresolved(result), result


def test_objects_of_other_files_of_the_run_count_too(tmp_path: Path) -> None:
    result = _audit(
        tmp_path,
        [_deployment()],
        [_template("h100-training"), _device_class("h100-training", "gpu.nvidia.com")],
    )
    assert _is_gpu_workload(result), result


def test_without_the_objects_the_claim_is_unknown_never_voided_and_named(tmp_path: Path) -> None:
    result = _audit(tmp_path, [_deployment()])
    assert _env_ops(result) == [[VOID]]  # the log shipper only
    assert "/spec/template/spec/containers/1/env" in [p["path"] for p in result["patch"]]
    (message,) = _unresolved(result)
    assert 'container "trainer" uses claim "gpu" (ResourceClaimTemplate h100)' in message


def test_a_class_the_files_do_not_hold_is_judged_by_its_name(tmp_path: Path) -> None:
    # gpu.nvidia.com is a GPU class by name (gpuDeviceClasses.names); a DeviceClass of
    # another name in the files does not make the cluster's class list known
    by_name = _audit(
        tmp_path, [_deployment(), _template("gpu.nvidia.com"), _device_class("nic", "nic.example")]
    )
    assert _is_gpu_workload(by_name), by_name
    unknown = _audit(tmp_path, [_deployment(), _template("h100-training")])
    (message,) = _unresolved(unknown)
    assert 'claim "gpu" (DeviceClass h100-training)' in message
    assert not _is_gpu_workload(unknown)


def test_a_non_gpu_class_in_the_files_is_known_as_such(tmp_path: Path) -> None:
    result = _audit(
        tmp_path, [_deployment(), _template("nic"), _device_class("nic", "nic.example")]
    )
    assert not _unresolved(result), result
    assert _env_ops(result) == [[VOID], [VOID]]  # both containers: the claim gives no GPU


def test_objects_stay_in_their_namespace(tmp_path: Path) -> None:
    elsewhere = [_deployment(), _template("gpu.nvidia.com", namespace="other")]
    assert _unresolved(_audit(tmp_path, elsewhere))
    # no namespace: the audit's --namespace, as `kubectl apply -n` would place it
    placed = [_deployment(), _template("gpu.nvidia.com", namespace=None)]
    assert _is_gpu_workload(_audit(tmp_path, placed, args=("--namespace", NS)))
    assert _unresolved(_audit(tmp_path, placed, args=("--namespace", "other")))


def test_the_files_objects_are_laid_over_a_snapshot(tmp_path: Path) -> None:
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "gpu-admission.io/v1",
                "kind": "ClusterSnapshot",
                "namespaces": {NS: {"labels": {"kubernetes.io/metadata.name": NS}}},
                "deviceClasses": [_device_class("gpu.nvidia.com", "gpu.nvidia.com")],
                "resourceClaimTemplates": [],
            }
        )
    )
    args = ("--cluster-snapshot", str(snapshot))
    # the snapshot knows every class: h100-training is not one of them, and the template is
    # in no file: unknown
    assert _unresolved(_audit(tmp_path, [_deployment(), _template("h100-training")], args=args))
    # the files bring the class: a GPU class by its driver
    with_class = [
        _deployment(),
        _template("h100-training"),
        _device_class("h100-training", "gpu.nvidia.com"),
    ]
    result = _audit(tmp_path, with_class, args=args)
    assert _is_gpu_workload(result), result
    assert not _unresolved(result)
