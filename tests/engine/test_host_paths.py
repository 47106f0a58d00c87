"""What a host path reaches, and the reason a denial gives: the classification against a table
that says why for each form, for named paths and for generated ones; and, from the other side,
host paths that start like a device path but are not one: whole segments decide, never a
string prefix. `/dev/nv` is not `/dev/nvidia0`, `/pro` is not `/proc`, `/devices` is not
`/dev`; each is classified as reaching nothing and takes no denial, while its lookalike
does, and a rule set's own listed paths cover whole segments only.

The oracle below is written apart from `webhook.ruleset.hostpaths` (regular expressions over
the normalised path, from the kernel's and the runtimes' layouts), so a row dropped or reordered
there is caught here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.hostreach import classify, covers_device_nodes, normalise, rows_for
from webhook.ruleset.hostpaths import DEVICES, GPU_SYSFS, HOST_ROOT, KINDS, RUNTIME
from webhook.ruleset.models import RuleSet

RULES = compile_rules(RuleSet())
DEFAULT_ROWS = rows_for(RuleSet().gpu_names().matches)
_PID = r"(?:\d+|self|thread-self)"
_RUN = r"/(?:var/)?run"

# (pattern of a normalised path, what it reaches, why): the first that matches decides.
ORACLE: list[tuple[str, str | None, str]] = [
    (r"/", DEVICES, "the host's /dev is under it"),
    (r"/dev", DEVICES, "every device node"),
    (r"/dev/nvidia[^/]*(/.*)?", DEVICES, "NVIDIA's nodes, nvidia-caps included"),
    (r"/dev/(dri|kfd|char)(/.*)?", DEVICES, "DRM, AMD's KFD, links to every char device"),
    (r"/dev/fd(/.*)?", HOST_ROOT, "/proc/self/fd"),
    (r"/proc", HOST_ROOT, "holds /proc/1/root"),
    (rf"/proc/{_PID}(/task/{_PID})*(/(root|cwd|task))?", HOST_ROOT, "a process, its root"),
    (rf"/proc/{_PID}(/task/{_PID})*/(fd|map_files)(/.*)?", HOST_ROOT, "its open files"),
    (r"/proc/bus(/pci(/.*)?)?", GPU_SYSFS, "PCI configuration space"),
    (r"/proc(/.*)?", None, "/proc/sys, /proc/cpuinfo and the like hold no device"),
    (r"/sys/fs(/(cgroup|bpf|fuse|selinux|pstore)(/.*)?)?", None, "no device, no link"),
    (r"/sys/kernel/(security|tracing|mm|config)(/.*)?", None, "no device, no link"),
    (r"/sys/(firmware|power|hypervisor)(/.*)?", None, "no device, no link"),
    (r"/sys/(class|dev)(/[^/]+)?|/sys/block", None, "links only, resolved in the container"),
    (r"/sys(/.*)?", GPU_SYSFS, "PCI devices, drivers, and links the host resolves to them"),
    (r"/(var/)?run|/var", RUNTIME, "holds runtime sockets"),
    (
        rf"{_RUN}/(containerd|docker|crio|k3s|k0s|podman"
        r"|docker\.sock|cri-dockerd\.sock|dockershim\.sock)(/.*)?",
        RUNTIME,
        "a runtime's socket",
    ),
    (r"/var/snap(/microk8s(/common(/run(/.*)?)?)?)?", RUNTIME, "MicroK8s's containerd"),
]


def expected(path: str) -> str | None:
    """What the oracle says `path` (normalised) reaches; a process's root leads to the host's."""
    root = re.fullmatch(rf"/proc/{_PID}(?:/task/{_PID})*/(?:root|cwd)(/.+)", path)
    if root:
        return expected(root.group(1))
    for pattern, kind, _ in ORACLE:
        if re.fullmatch(pattern, path):
            return kind
    return None


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/", DEVICES),
        ("//", DEVICES),
        ("/dev", DEVICES),
        ("/dev/", DEVICES),
        ("/dev/nvidia0", DEVICES),
        ("/dev/nvidia-caps/nvidia-cap1", DEVICES),
        ("/dev/nvidia-caps-imex-channels", DEVICES),
        ("/dev/dri/renderD128", DEVICES),
        ("/dev/kfd", DEVICES),
        ("/dev/char/195:0", DEVICES),
        ("/var/../dev/./nvidia0", DEVICES),
        ("/dev/shm", None),
        ("/dev/accel/accel0", None),  # Gaudi's nodes: only where its resources are GPUs
        ("/dev/aperture_devices", None),
        ("/proc", HOST_ROOT),
        ("/proc/1", HOST_ROOT),
        ("/proc/1/root", HOST_ROOT),
        ("/proc/self/cwd", HOST_ROOT),
        ("/proc/1/fd/3", HOST_ROOT),
        ("/proc/1/task/1/root", HOST_ROOT),
        ("/proc/1/root/dev/nvidia0", DEVICES),  # the host's /dev, through pid 1's root
        ("/proc/1/root/run/containerd/containerd.sock", RUNTIME),
        ("/proc/1/root/etc", None),
        ("/proc/sys", None),  # kernel settings: no device
        ("/proc/sys/net/ipv4", None),
        ("/proc/1/cgroup", None),
        ("/proc/bus/pci", GPU_SYSFS),
        ("/sys", GPU_SYSFS),
        ("/sys/bus/pci", GPU_SYSFS),
        ("/sys/bus/pci/drivers/nvidia/unbind", GPU_SYSFS),
        ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/resource0", GPU_SYSFS),
        ("/sys/class/drm/card0/device", GPU_SYSFS),
        ("/sys/class/net/eth0/device/subsystem", GPU_SYSFS),  # the host resolves it to bus/pci
        ("/sys/kernel/debug", GPU_SYSFS),
        ("/sys/module/nvidia/drivers/pci:nvidia", GPU_SYSFS),
        ("/sys/class/drm", None),  # links only: they resolve inside the container
        ("/sys/fs/cgroup", None),
        ("/sys/fs/bpf", None),
        ("/sys/kernel/security", None),
        ("/run", RUNTIME),
        ("/var/run", RUNTIME),
        ("/run/containerd/containerd.sock", RUNTIME),
        ("/var/run/docker.sock", RUNTIME),
        ("/run/crio/crio.sock", RUNTIME),
        ("/var/run/cri-dockerd.sock", RUNTIME),
        ("/run/k3s/containerd/containerd.sock", RUNTIME),
        ("/var/snap/microk8s/common/run/containerd.sock", RUNTIME),
        ("/run/nvidia/driver", None),
        ("/run/xtables.lock", None),
        ("/var/log", None),
        ("/var/lib/kubelet/device-plugins", None),
        ("/etc/os-release", None),
    ],
)
def test_each_host_path_form_reaches_what_the_table_says(path: str, kind: str | None) -> None:
    found = classify(normalise(path), DEFAULT_ROWS)
    assert (found.kind if found else None) == kind == expected(normalise(path))


_SEGMENTS = st.sampled_from(
    [
        *["", ".", "..", "dev", "nvidia0", "nvidia-caps", "dri", "kfd", "char", "195:0", "fd"],
        *["shm", "accel", "proc", "1", "self", "task", "root", "cwd", "map_files", "bus", "pci"],
        *["sys", "devices", "fs", "cgroup", "btrfs", "kernel", "debug", "security", "class"],
        *["drm", "card0", "net", "block", "firmware", "module", "run", "var", "containerd"],
        *["docker.sock", "crio", "k3s", "snap", "microk8s", "common", "etc", "log", "nvidia"],
    ]
)


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(st.lists(_SEGMENTS, max_size=7), st.booleans())
def test_every_generated_host_path_is_classified_as_the_table_says(
    segments: list[str], trailing_slash: bool
) -> None:
    path = normalise("/" + "/".join(segments) + ("/" if trailing_slash else ""))
    found = classify(path, DEFAULT_ROWS)
    assert (found.kind if found else None) == expected(path), path


def _pod(path: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "image": "busybox",
                    "volumeMounts": [{"name": "h", "mountPath": "/h"}],
                }
            ],
            "volumes": [{"name": "h", "hostPath": {"path": path}}],
        },
    }


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/dev/nvidia0", DEVICES),
        ("/proc/1/root", HOST_ROOT),
        ("/sys/bus/pci", GPU_SYSFS),
        ("/run/containerd", RUNTIME),
    ],
)
def test_each_denial_names_the_actual_reason(path: str, kind: str) -> None:
    decision = evaluate(subject_for(_pod(path), namespace="ml-team"), RULES)
    found = [j.finding for j in decision.judged if j.finding.rule == "host-gpu-devices"]
    assert found, path
    assert KINDS[kind] in found[0].summary
    others = [KINDS[k] for k in KINDS if k != kind and KINDS[k] not in KINDS[kind]]
    assert not any(text in found[0].summary for text in others)


def test_proc_sys_is_not_device_access() -> None:
    """A RayCluster worker template declaring hostPath /proc/sys (mounted by no container)."""
    decision = evaluate(subject_for(_pod("/proc/sys"), namespace="ml-team"), RULES)
    assert not [j for j in decision.judged if j.finding.rule == "host-gpu-devices"]


def test_accelerator_nodes_count_where_their_resources_are_gpus() -> None:
    gaudi = compile_rules(RuleSet(gpuResources=["nvidia.com/gpu", "habana.ai/gaudi"]))
    decision = evaluate(subject_for(_pod("/dev/accel/accel0"), namespace="ml-team"), gaudi)
    assert [j.finding.rule for j in decision.judged] == ["host-gpu-devices"]
    decision = evaluate(subject_for(_pod("/dev/accel/accel0"), namespace="ml-team"), RULES)
    assert not [j for j in decision.judged if j.finding.rule == "host-gpu-devices"]


def test_paths_the_rule_set_lists_count_beside_the_built_in_ones() -> None:
    listed = compile_rules(
        RuleSet.model_validate({"rules": {"host-gpu-devices": {"paths": ["/opt/gpu/*"]}}})
    )
    decision = evaluate(subject_for(_pod("/opt/gpu/ctl"), namespace="ml-team"), listed)
    found = [j.finding for j in decision.judged if j.finding.rule == "host-gpu-devices"]
    assert found and "host-gpu-devices.paths" in found[0].summary


# --- near misses: a string prefix of a device path is not a segment of one ---------------------

# (a path that shares a string prefix with a device path, the path it looks like, its reach)
NEAR_MISSES = [
    ("/de", "/dev", DEVICES),
    ("/devices", "/dev", DEVICES),
    ("/dev2/nvidia0", "/dev/nvidia0", DEVICES),
    ("/dev/nv", "/dev/nvidia0", DEVICES),
    ("/dev/nvi", "/dev/nvidia0", DEVICES),
    ("/dev/dri2", "/dev/dri", DEVICES),
    ("/dev/driver", "/dev/dri", DEVICES),
    ("/dev/kfd0", "/dev/kfd", DEVICES),
    ("/dev/charx", "/dev/char", DEVICES),
    ("/dev/shmnvidia", "/dev/shm", None),
    ("/pro", "/proc", HOST_ROOT),
    ("/proc1", "/proc", HOST_ROOT),
    ("/procfs/1/root", "/proc/1/root", HOST_ROOT),
    ("/proc/bus2", "/proc/bus", GPU_SYSFS),
    ("/sy", "/sys", GPU_SYSFS),
    ("/sysfs", "/sys", GPU_SYSFS),
    ("/system/bus/pci", "/sys/bus/pci", GPU_SYSFS),
    ("/ru", "/run", RUNTIME),
    ("/runner", "/run", RUNTIME),
    ("/var/runx", "/var/run", RUNTIME),
    ("/var/run/nvidia-x", "/var/run/containerd", RUNTIME),
    ("/var/run/containerd2", "/var/run/containerd", RUNTIME),
    ("/run/docker.sock.bak", "/run/docker.sock", RUNTIME),
    ("/var/snapshot", "/var/snap", RUNTIME),
    ("/va", "/var", RUNTIME),
    ("/variable", "/var", RUNTIME),
]


@pytest.mark.parametrize(
    ("path", "lookalike", "kind"), NEAR_MISSES, ids=[p for p, _, _ in NEAR_MISSES]
)
def test_a_near_miss_reaches_nothing_while_its_lookalike_does(
    path: str, lookalike: str, kind: str | None
) -> None:
    found = classify(normalise(path), DEFAULT_ROWS)
    assert found is None, (path, found)
    near = classify(normalise(lookalike), DEFAULT_ROWS)
    assert (near.kind if near else None) == kind, lookalike  # the pair differs only here


@pytest.mark.parametrize(
    ("path", "lookalike", "kind"), NEAR_MISSES, ids=[p for p, _, _ in NEAR_MISSES]
)
def test_a_near_miss_takes_no_host_device_denial(
    path: str, lookalike: str, kind: str | None
) -> None:
    decision = evaluate(subject_for(_pod(path), namespace="ml-team"), RULES)
    assert not [j for j in decision.judged if j.finding.rule == "host-gpu-devices"], path
    if kind is not None:
        decision = evaluate(subject_for(_pod(lookalike), namespace="ml-team"), RULES)
        assert [j for j in decision.judged if j.finding.rule == "host-gpu-devices"], lookalike


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/dev/nvidia0", True),
        ("/dev", True),  # the directory above what is listed
        ("/", True),
        ("/dev/nv", False),
        ("/dev/nvidia", True),  # the pattern's own start is one of its paths: nvidia*
        ("/devices", False),
        ("/de", False),
        ("dev/nvidia0", False),  # relative: the apiserver refuses it
        ("/opt/gpu", False),
        ("/opt/gpu-tools/bin", True),
        ("/opt/gpu-toolsx", False),
        ("/opt", True),
        ("/op", False),
    ],
)
def test_listed_paths_cover_whole_segments_only(path: str, expected: bool) -> None:
    """`host-gpu-devices.paths` of a rule set: a path it matches, or a directory above one."""
    assert covers_device_nodes(path, ["/dev/nvidia*", "/opt/gpu-tools/**"]) is expected
