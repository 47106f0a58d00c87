"""The end-to-end suite's fixtures: one real control plane per run (the release in
GPU_ADMISSION_E2E_VERSION, default the oldest pinned), and gpu-admission installed into it as the
shipped manifests install it: its namespace, ServiceAccount and ClusterRole applied unchanged,
`serve` reading the cluster with that account's token, and the shipped webhook configurations
registered with only `clientConfig` pointed at the loopback server.

`make e2e` runs this folder once per pinned release. Without Go (and without
GPU_ADMISSION_E2E=required, which CI sets) every test here is skipped with one line saying how to
run them."""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import binaries
from e2e import cluster as clustermod
from e2e.support import MANIFESTS, ROOT, Installed, gpu_pod, start_serve, stop_process

HOW_TO_RUN = (
    "the end-to-end tests run on a real control plane built from Go modules: install Go and "
    "run `make e2e` (GPU_ADMISSION_E2E=required makes a missing toolchain a failure)"
)
REQUIRED = os.environ.get("GPU_ADMISSION_E2E") == "required"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def pytest_report_header() -> str:
    return (
        f"control plane: Kubernetes {selected_release().kubernetes} (cached binaries at "
        f"{binaries.bin_dir(selected_release())})"
    )


def selected_release() -> binaries.Release:
    return binaries.release_named(
        os.environ.get("GPU_ADMISSION_E2E_VERSION", binaries.RELEASES[0].kubernetes)
    )


@pytest.fixture(scope="session")
def release() -> binaries.Release:
    return selected_release()


@pytest.fixture(scope="session")
def controlplane(release: binaries.Release) -> Iterator[clustermod.ControlPlane]:
    if not binaries.is_built(release):
        if binaries.find_go() is None:
            if REQUIRED:
                pytest.fail(f"GPU_ADMISSION_E2E=required but no Go toolchain: {HOW_TO_RUN}")
            pytest.skip(HOW_TO_RUN)
        binaries.build(release)  # `make controlplane` does this first; a failure fails here
    plane = clustermod.ControlPlane(release).start()
    try:
        yield plane
    finally:
        plane.stop()


# --- gpu-admission, installed -----------------------------------------------------------------


def shipped(path: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / path).read_text()) if d]


def loopback_webhook_configs(url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The shipped Validating/MutatingWebhookConfigurations with only clientConfig rewritten."""
    configs = []
    for doc in shipped("base/webhooks.yaml"):
        doc = copy.deepcopy(doc)
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"{url}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
        configs.append(doc)
    return configs


def apply(plane: clustermod.ControlPlane, docs: list[dict[str, Any]]) -> None:
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


@pytest.fixture(scope="session")
def installed(
    controlplane: clustermod.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    plane = controlplane
    folder = tmp_path_factory.mktemp("gpu-admission")
    if os.environ.get("GPU_ADMISSION_EXPECT_COMPILED"):
        # `make e2e` serves the compiled build the image ships: make sure that is what runs
        where = subprocess.run(
            [sys.executable, "-c", "import webhook.engine.admit as m; print(m.__file__)"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout.strip()
        assert where.endswith(".so"), f"serve would run the sources ({where}), not the build"
    apply(plane, shipped("base/namespace.yaml") + shipped("base/rbac.yaml"))
    token = plane.kubectl(
        "create", "token", "gpu-admission", "-n", "gpu-admission", "--duration=4h"
    ).stdout.strip()
    sa_kubeconfig = folder / "sa.kubeconfig"
    sa_kubeconfig.write_text(
        clustermod.kubeconfig_text(plane.url, plane.pki.ca_cert, user={"token": token})
    )
    certs = folder / "certs"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "certs",
            "generate",
            "--out",
            str(certs),
            "--hosts",
            "127.0.0.1,localhost",
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    rules = folder / "rules"
    rules.mkdir()
    shutil.copy(MANIFESTS / "base" / "rules" / "team.yaml", rules / "team.yaml")
    process, log, port, probe = start_serve(
        folder, sa_kubeconfig=sa_kubeconfig, certs=certs, rules=rules
    )
    url = f"https://127.0.0.1:{port}"
    configs = loopback_webhook_configs(url, (certs / "ca.crt").read_bytes())
    apply(plane, configs)
    hook = Installed(
        plane, process, log, url, f"http://127.0.0.1:{probe}", rules, certs, configs, sa_kubeconfig
    )
    try:
        wait_until_called(hook)
        yield hook
    finally:
        stop_process(process)
        forbidden = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if "forbidden" in line.lower()
        ]
        assert not forbidden, (
            "the shipped ClusterRole is not enough: the webhook's reads were forbidden:\n"
            + "\n".join(forbidden[:10])
        )


def wait_until_called(hook: Installed) -> None:
    """The apiserver picks a new webhook configuration up within a second or so: wait until a
    server-side dry run of a GPU pod comes back mutated."""
    pod = gpu_pod("probe-ready")
    deadline = time.monotonic() + 30
    while True:
        done = hook.plane.kubectl(
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-n",
            "default",
            "-f",
            "-",
            stdin=json.dumps(pod),
            check=False,
        )
        if done.returncode == 0 and json.loads(done.stdout)["spec"]["containers"][0][
            "resources"
        ].get("limits"):
            return
        assert time.monotonic() < deadline, f"webhook never called:\n{done.stderr}\n{hook.tail()}"
        time.sleep(0.3)


@pytest.fixture
def namespace(
    controlplane: clustermod.ControlPlane, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace with its default ServiceAccount in place, deleted afterwards."""
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-")
    name = f"{name}-{int(time.time() * 1000) % 100000}"
    controlplane.kubectl("create", "namespace", name)
    deadline = time.monotonic() + 30
    while (
        controlplane.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode
        != 0
    ):
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.1)
    yield name
    controlplane.kubectl("delete", "namespace", name, "--wait=false", check=False)
