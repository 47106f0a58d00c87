"""An outage as the shipped failure policies make it: with the webhook down, GPU pods are
refused (validating: Fail) while plain pods and kube-system are untouched; back up, GPU pods
are admitted again."""

from __future__ import annotations

import json

from tests.e2e.support import Installed, eventually, gpu_pod


def test_a_stopped_webhook_refuses_gpu_pods_and_nothing_else(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]},
    }
    complete = gpu_pod("while-down")
    complete["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    installed.stop()
    try:
        # validating: Fail. A GPU pod the rules would admit is refused while nobody can judge it
        refused = plane.kubectl(
            "create", "-n", namespace, "-f", "-", stdin=json.dumps(complete), check=False
        )
        assert refused.returncode != 0
        assert 'failed calling webhook "validate.gpu-admission.io"' in refused.stderr, (
            refused.stderr
        )
        # mutating: Ignore. Nobody copies the GPU into limits, and the apiserver's own
        # validation refuses a GPU only in requests
        unmutated = plane.kubectl(
            "create",
            "-n",
            namespace,
            "-f",
            "-",
            stdin=json.dumps(gpu_pod("requests-only")),
            check=False,
        )
        assert "Limit must be set for non overcommitable resources" in unmutated.stderr
        plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(plain))
        # kube-system is never sent: an outage cannot block the control plane's own pods
        system = {**complete, "metadata": {"name": f"system-{namespace}"[:60]}}
        plane.kubectl("create", "-n", "kube-system", "-f", "-", stdin=json.dumps(system))
        plane.kubectl(
            "delete", "pod", system["metadata"]["name"], "-n", "kube-system", "--wait=false"
        )
    finally:
        installed.start()

    def admitted() -> bool:
        done = plane.kubectl(
            "create", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_pod("back-up")), check=False
        )
        return done.returncode == 0

    eventually(admitted, what="GPU pods admitted once the webhook is back")
    pod = json.loads(plane.kubectl("get", "pod", "back-up", "-n", namespace, "-o", "json").stdout)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
