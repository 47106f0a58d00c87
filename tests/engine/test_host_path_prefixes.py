"""Host paths that start like a device path but are not one: whole segments decide, never a
string prefix. `/dev/nv` is not `/dev/nvidia0`, `/pro` is not `/proc`, `/devices` is not
`/dev`; each is classified as reaching nothing and takes no denial, while its lookalike
does, and a rule set's own listed paths cover whole segments only.
"""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.hostreach import (
    classify,
    covers_device_nodes,
    normalise,
    rows_for,
)
from webhook.ruleset.hostpaths import DEVICES, GPU_SYSFS, HOST_ROOT, RUNTIME
from webhook.ruleset.models import RuleSet

RULES = compile_rules(RuleSet())
ROWS = rows_for(RuleSet().gpu_names().matches)

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
    ("path", "lookalike", "kind"), NEAR_MISSES, ids=[p for p, _, _ in NEAR_MISSES]
)
def test_a_near_miss_reaches_nothing_while_its_lookalike_does(
    path: str, lookalike: str, kind: str | None
) -> None:
    found = classify(normalise(path), ROWS)
    assert found is None, (path, found)
    near = classify(normalise(lookalike), ROWS)
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
