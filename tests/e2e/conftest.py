"""The end-to-end suite's fixtures: one real control plane per run (the release in
GPU_ADMISSION_E2E_VERSION, default the oldest pinned), and gpu-admission installed into it as the
shipped manifests install it: its namespace, ServiceAccount and ClusterRole applied unchanged,
`serve` reading the cluster with that account's token, and the shipped webhook configurations
registered with only `clientConfig` pointed at the loopback server.

`make e2e` runs this folder once per pinned release. Without Go (and without
GPU_ADMISSION_E2E=required, which CI sets) every test here is skipped with one line saying how to
run them."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import binaries
from tests.e2e import cluster as clustermod
from tests.e2e.support import MANIFESTS, Installed, install, stop_process
from webhook.engine.compiled import compile_rules
from webhook.export.bundle import build
from webhook.ruleset.files import load_rules

HOW_TO_RUN = (
    "the end-to-end tests run on a real control plane built from Go modules: install Go and "
    "run `make e2e` (GPU_ADMISSION_E2E=required makes a missing toolchain a failure)"
)
REQUIRED = os.environ.get("GPU_ADMISSION_E2E") == "required"


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (a CI job cancelled, `kill`) ends the run as Ctrl-C does: the fixtures' tear-down
    still stops the control plane and removes its temp folder. Only in an end-to-end run: the
    unit runs' xdist workers keep their own handling."""
    if config.option.markexpr == "e2e":
        signal.signal(signal.SIGTERM, _interrupted)


# pytest-timeout's limit for an end-to-end test (the unit tests' is pyproject's): the first one
# of a run also waits for the control plane to come up (one to two minutes on 2 cores).
E2E_TIMEOUT = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))


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


@pytest.fixture(scope="session")
def installed(
    controlplane: clustermod.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    hook = install(controlplane, tmp_path_factory.mktemp("gpu-admission"))
    try:
        yield hook
    finally:
        stop_process(hook.process)  # the one serving now: a test may have restarted it
        forbidden = [
            line
            for log in sorted(hook.log.parent.glob("serve*.log"))
            for line in log.read_text(errors="replace").splitlines()
            if "forbidden" in line.lower()
        ]
        assert not forbidden, (
            "the shipped ClusterRole is not enough: the webhook's reads were forbidden:\n"
            + "\n".join(forbidden[:10])
        )


@pytest.fixture(scope="session")
def stored_policies(installed: Installed) -> Iterator[list[dict[str, Any]]]:
    """The shipped rules' exported Validating/MutatingAdmissionPolicies, created once per run.

    Without their bindings they judge nothing, so they can stay for the whole run: the
    apiserver compiles each (tens of kilobytes of CEL) for seconds of a core when it is
    created, and the tests that read them back and that bind them share that one creation.
    Empty where this release is exported no policy."""
    plane = installed.plane
    version = tuple(int(x) for x in plane.release.minor.removeprefix("v").split("."))
    export = build(
        compile_rules(load_rules(MANIFESTS / "base" / "rules")), (version[0], version[1])
    )
    policies = [d for d in export.objects if d["kind"].endswith("Policy")]
    if not policies:
        yield []
        return
    plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(policies), timeout=600)
    try:
        yield policies
    finally:
        plane.kubectl(
            "delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(policies), check=False
        )


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


@pytest.fixture(autouse=True)
def rules_put_back(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that lays its own rules over the shipped ones leaves them behind when it fails
    half-way: the next test starts from the shipped rules again."""
    yield
    if "installed" not in request.fixturenames:
        return
    hook: Installed = request.getfixturevalue("installed")
    extra = hook.rules / "e2e.yaml"
    if extra.exists() and extra.read_text() != "{}\n":
        hook.set_rules("{}\n")
