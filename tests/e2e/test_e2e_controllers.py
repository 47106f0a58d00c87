"""GPU workloads through the real controllers: the Deployment, Job and StatefulSet templates are
mutated at apply, the pods the controller-manager makes from them are admitted with the same
result and mutated once (no second /dev/shm under reinvocation), and an UPDATE that changes the
template is judged again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.support import Installed, eventually, gpu_pod, kube_json


def workload(kind: str, name: str) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": name}}, "spec": gpu_pod(name)["spec"]}
    spec: dict[str, Any] = {"template": template}
    api = "apps/v1"
    if kind == "Job":
        api = "batch/v1"
        template["spec"]["restartPolicy"] = "Never"
        spec["backoffLimit"] = 0
    else:
        spec |= {"replicas": 1, "selector": {"matchLabels": {"app": name}}}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec}


def shm_once(spec: dict[str, Any]) -> None:
    volumes = [
        v for v in spec.get("volumes", []) if v.get("emptyDir", {}).get("medium") == "Memory"
    ]
    assert len(volumes) == 1, spec.get("volumes")
    for container in spec["containers"]:
        mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
        assert len(mounts) == 1, container.get("volumeMounts")
    tolerations = [t for t in spec.get("tolerations", []) if t.get("key") == "nvidia.com/gpu"]
    assert len(tolerations) == 1, spec.get("tolerations")
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


@pytest.mark.parametrize("kind", ["Deployment", "Job", "StatefulSet"])
def test_a_gpu_workloads_template_and_its_pods_are_mutated_once(
    installed: Installed, namespace: str, kind: str
) -> None:
    plane = installed.plane
    name = kind.lower()
    plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(workload(kind, name)))
    stored = kube_json(plane, "get", kind.lower(), name, "-n", namespace)
    template = stored["spec"]["template"]["spec"]
    shm_once(template)

    def pods() -> list[dict[str, Any]]:
        found = kube_json(plane, "get", "pods", "-n", namespace, "-l", f"app={name}")
        return list(found["items"])

    pod = eventually(pods, what=f"the {kind} controller making a pod")[0]
    shm_once(pod["spec"])
    # the pod is its template: the controller copied what the webhook wrote, and the webhook's
    # second look at the pod added nothing
    # (the pod also gets its service-account token volume from the apiserver)
    assert [v for v in pod["spec"]["volumes"] if v["name"] == "dshm"] == [
        v for v in template["volumes"] if v["name"] == "dshm"
    ]
    assert pod["spec"].get("priorityClassName") == template.get("priorityClassName")
    assert pod["spec"]["containers"][0]["resources"] == template["containers"][0]["resources"]


def test_an_update_that_changes_the_template_is_judged_again(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(workload("Deployment", "served"))
    )
    sidecar = {
        "name": "sidecar",
        "image": "busybox",
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
    }
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        kube_json(plane, "get", "deployment", "served", "-n", namespace)["spec"][
                            "template"
                        ]["spec"]["containers"][0],
                        sidecar,
                    ]
                }
            }
        }
    }
    done = plane.kubectl(
        "patch",
        "deployment",
        "served",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps(patch),
        check=False,
    )
    assert done.returncode != 0
    assert "visible-devices" in done.stderr and "sidecar" in done.stderr
    # a template change the rules accept is patched on UPDATE as on CREATE
    second = gpu_pod("second")["spec"]["containers"][0] | {"name": "second"}
    patch["spec"]["template"]["spec"]["containers"][1] = second
    plane.kubectl(
        "patch", "deployment", "served", "-n", namespace, "--type=merge", "-p", json.dumps(patch)
    )
    containers = kube_json(plane, "get", "deployment", "served", "-n", namespace)["spec"][
        "template"
    ]["spec"]["containers"]
    assert containers[1]["resources"]["limits"]["nvidia.com/gpu"] == "1"
