"""The GPU-access model's parts: taints a pod tolerates, host paths that hold device nodes, a
pod's effective request with sidecars, and the routing that must send every way in."""

from __future__ import annotations

import posixpath
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.routing import selects
from tests.support.routingexamples import KINDS
from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.hostreach import classify, normalise, rows_for
from webhook.engine.reach import tolerates_taint
from webhook.podrequest import effective_request
from webhook.ruleset.models import RuleSet

RULES = compile_rules(RuleSet())
ROWS = rows_for(RuleSet().gpu_names().matches)
GPU_TAINT = ("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "nvidia.com/gpu", "value": "present"}, True),  # operator defaults to Equal
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}, False),
        ({"operator": "Exists"}, True),  # no key: every taint
        ({"operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "", "operator": "Equal"}, False),  # an empty key only goes with Exists
        ({"key": "dedicated", "operator": "Exists"}, False),
    ],
)
def test_tolerations_follow_the_schedulers_rules(
    toleration: dict[str, Any], expected: bool
) -> None:
    assert tolerates_taint(toleration, GPU_TAINT) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", True),
        ("//", True),
        ("/dev", True),
        ("/dev/", True),
        ("/dev/char", True),
        ("/dev/char/195:0", True),
        ("/dev/nvidia0", True),
        ("/dev/nvidiactl", True),
        ("/dev/dri/renderD128", True),
        ("/dev/kfd", True),
        ("/var/../dev/./nvidia0", True),
        ("/proc", True),
        ("/proc/1/root", True),
        ("/proc/self/root/dev", True),
        ("/proc/sys", False),  # kernel settings, no device
        ("/sys/bus/pci", True),  # the GPUs' PCI devices
        ("/run/containerd/containerd.sock", True),  # a runtime socket
        ("/dev/shm", False),
        ("/dev/log", False),
        ("/var/log", False),
        ("/run/nvidia", False),
        ("dev", False),  # not absolute: the apiserver refuses it anyway
    ],
)
def test_host_paths_that_reach_gpus(path: str, expected: bool) -> None:
    assert (classify(normalise(path), ROWS) is not None) is expected


_SEGMENTS = st.sampled_from(
    [
        "",
        ".",
        "..",
        "dev",
        "char",
        "195:0",
        "nvidia0",
        "nvidiactl",
        "dri",
        "kfd",
        "shm",
        "var",
        "proc",
        "1",
        "root",
        "sys",
        "bus",
        "pci",
        "fs",
        "cgroup",
        "class",
        "drm",
        "kernel",
        "run",
        "var",
        "containerd",
        "docker.sock",
        "snap",
        "microk8s",
    ]
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_SEGMENTS, max_size=5), st.booleans())
def test_every_host_path_the_engine_denies_is_sent_by_the_match_conditions(
    segments: list[str], trailing_slash: bool
) -> None:
    """The conditions are a superset of the engine for any spelling of a host path."""
    path = "/" + "/".join(segments) + ("/" if trailing_slash else "")
    spec = {
        "containers": [{"name": "a", "image": "busybox"}],
        "volumes": [{"name": "h", "hostPath": {"path": path}}],
    }
    obj = KINDS["Pod"](spec)
    decision = evaluate(subject_for(obj, namespace="ml-team"), RULES)
    if any(j.finding.rule == "host-gpu-devices" for j in decision.judged):
        assert selects(obj), path


@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    st.lists(st.sampled_from(["", ".", "..", "...", ".cache", "dev.", "dev", "/"]), max_size=6),
    st.sampled_from(["/", "//", "", "./"]),
)
def test_a_mount_path_resolves_as_the_kubelet_resolves_it(segments: list[str], lead: str) -> None:
    """Whatever the spelling (hidden directories, dots, doubled slashes), `normalise` gives
    what a POSIX path resolution gives: the shortcut for paths already clean changes nothing."""
    path = lead + "/".join(segments)
    expected = posixpath.normpath(path) if path else path
    if expected.startswith("//"):  # POSIX keeps a leading `//`; the kubelet does not
        expected = "/" + expected.lstrip("/")
    assert normalise(path) == expected


def _asks(n: int) -> dict[str, Fraction]:
    return {"nvidia.com/gpu": Fraction(n)} if n else {}


@pytest.mark.parametrize(
    ("regular", "init", "expected"),
    [
        ([1, 2], [], 3),  # regular containers add up
        ([1], [(4, False)], 4),  # an init container alone may need more
        ([1], [(2, False), (3, False)], 3),  # init containers run one at a time
        ([1], [(1, True)], 2),  # a sidecar runs beside the regular containers
        ([3], [(2, True)], 5),
        # the init container after a sidecar runs beside it: 2 + 3
        ([1], [(2, True), (3, False)], 5),
        # the init container before the sidecar does not: max(3, 1 + 2)
        ([1], [(3, False), (2, True)], 3),
        ([], [], 0),
    ],
)
def test_the_effective_request_is_kubernetes_formula(
    regular: list[int], init: list[tuple[int, bool]], expected: int
) -> None:
    got = effective_request([_asks(n) for n in regular], [(_asks(n), s) for n, s in init])
    assert got.get("nvidia.com/gpu", Fraction(0)) == expected
