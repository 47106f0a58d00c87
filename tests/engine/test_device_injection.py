"""Device-injection annotations: NRI plugins add the devices and mounts a pod's annotations list,
unprivileged and without an allocation, so they are judged as hostPaths of what they name; the
routing sends such pods, and the reader takes only the forms it reads as YAML does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.routing import selects
from tests.support.routingexamples import KINDS
from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.injection import Unreadable, injections, read_value
from webhook.engine.prefilter import gated, markers, might_apply
from webhook.ruleset.models import RuleSet

RULES = compile_rules(RuleSet())

# GKE's GPUDirect-TCPXO sample: the daemon gets every GPU of the node through the annotation.
TCPXO = """\
- path: /dev/nvidia0
- path: /dev/nvidia1
- path: /dev/nvidiactl
- path: /dev/nvidia-uvm
- path: /dev/dmabuf_import_helper
"""


def _pod(annotations: dict[str, str], gpus: int = 0) -> dict[str, Any]:
    limits = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": annotations},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": limits},
                {"name": "tcpxo-daemon", "image": "busybox"},
            ]
        },
    }


def _denials(obj: dict[str, Any]) -> list[str]:
    decision = evaluate(subject_for(obj, namespace="ml-team"), RULES)
    return [j.finding.summary for j in decision.judged if j.finding.rule == "host-gpu-devices"]


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("devices.gke.io/container.tcpxo-daemon", TCPXO, "holds GPU device nodes"),
        ("devices.gke.io/pod", "- path: /dev/nvidia0\n", "holds GPU device nodes"),
        ("devices.gke.io", '[{"path": "/dev/dri/renderD128"}]', "holds GPU device nodes"),
        (
            "devices.noderesource.dev/container.tcpxo-daemon",
            "- path: /dev/gpu0\n  type: c\n  major: 195\n  minor: 0\n",
            "holds GPU device nodes",
        ),
        ("devices.nri.io/pod", "- path: /dev/x\n  type: c\n  major: 226\n  minor: 128\n", "device"),
        (
            "mounts.noderesource.dev/container.main",
            "- source: /sys/bus/pci\n  destination: /pci\n  type: bind\n  options: [rbind]\n",
            "PCI devices in sysfs",
        ),
        (
            "mounts.nri.io/pod",
            "- source: /run/containerd\n  destination: /c\n  type: bind\n  options:\n"
            "    - rbind\n    - ro\n",
            "container runtime socket",
        ),
        ("mounts.nri.io", "- source: none\n  destination: /s\n  type: sysfs\n", "sysfs"),
        ("cdi-devices.noderesource.dev/container.main", "- nvidia.com/gpu=all\n", "CDI device"),
        ("cdi.nri.io/pod", "- amd.com/gpu=0\n", "CDI device"),
        ("devices.gke.io/pod", "- path: !!str /dev/nvidia0\n", "cannot be read"),
        ("devices.gke.io/pod", '- path: "\\x2fdev/nvidia0"\n', "cannot be read"),
        ("devices.gke.io/pod", "- path: /dev/../dev/nvidia0\n", "cannot be read"),
    ],
)
def test_an_injection_annotation_is_judged_as_a_host_path_to_what_it_names(
    key: str, value: str, reason: str
) -> None:
    found = _denials(_pod({key: value}))
    assert found, key
    assert f"annotation {key!r}" in found[0] and reason in found[0], found[0]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("devices.gke.io/container.tcpxo-daemon", "- path: /dev/dmabuf_import_helper\n"),
        ("devices.gke.io/container.tcpxo-daemon", "- path: /dev/aperture_devices\n"),
        ("mounts.noderesource.dev/pod", "- source: /var/log\n  destination: /l\n  type: bind\n"),
        ("devices.gke.io/other", "- path: /dev/nvidia0\n"),  # no plugin reads this key
        ("example.com/devices", "- path: /dev/nvidia0\n"),
    ],
)
def test_injections_that_reach_no_gpu_are_allowed(key: str, value: str) -> None:
    assert _denials(_pod({key: value})) == []


def test_the_denial_names_the_container_and_where_the_annotation_is() -> None:
    decision = evaluate(
        subject_for(_pod({"devices.gke.io/container.tcpxo-daemon": TCPXO}), namespace="ml-team"),
        RULES,
    )
    finding = next(j.finding for j in decision.judged if j.finding.rule == "host-gpu-devices")
    assert 'container "tcpxo-daemon"' in finding.summary
    assert "device '/dev/nvidia0'" in finding.summary
    assert finding.field == 'metadata.annotations["devices.gke.io/container.tcpxo-daemon"]'


def _annotate(node: Any, annotations: dict[str, str]) -> int:
    """Annotate every pod template (a `metadata` beside a `spec` with containers) in `node`."""
    found = 0
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and "containers" in spec:
            node.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
            found += 1
        found += sum(_annotate(v, annotations) for v in node.values())
    elif isinstance(node, list):
        found += sum(_annotate(v, annotations) for v in node)
    return found


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob", "RayCluster-worker", "JobSet"])
def test_a_template_annotation_is_judged_and_routed(kind: str) -> None:
    obj = KINDS[kind]({"containers": [{"name": "tcpxo-daemon", "image": "busybox"}]})
    assert _annotate(obj, {"devices.gke.io/container.tcpxo-daemon": TCPXO})
    assert _denials(obj)
    assert selects(obj)


@pytest.mark.parametrize(
    "key",
    [
        "devices.gke.io/container.x",
        "devices.gke.io",
        "devices.noderesource.dev/pod",
        "devices.nri.io/container.x",
        "mounts.noderesource.dev",
        "mounts.nri.io/pod",
        "cdi-devices.noderesource.dev/container.x",
        "cdi-devices.nri.io/pod",
        "cdi.nri.io/container.x",
    ],
)
def test_every_injection_annotation_is_routed_and_passes_the_fast_path(key: str) -> None:
    obj = KINDS["Pod"]({"containers": [{"name": "x", "image": "busybox"}]})
    value = {
        "devices": "- path: /dev/nvidia0\n",
        "mounts.": "- source: /dev\n  destination: /d\n",
        "cdi": "- nvidia.com/gpu=all\n",
    }
    family = next(f for f in value if key.startswith(f))
    obj["metadata"]["annotations"] = {key: value[family]}
    assert selects(obj), key
    compact = json.dumps(obj, separators=(",", ":")).encode()
    assert might_apply(compact, gated(markers(RuleSet()))), key
    assert _denials(obj), key


def test_a_plain_pod_with_other_annotations_is_not_routed() -> None:
    obj = KINDS["Pod"]({"containers": [{"name": "x", "image": "busybox"}]})
    obj["metadata"]["annotations"] = {"example.com/devices": "x", "devices": "y"}
    assert not selects(obj)


# ---- the reader: what it takes, it reads as YAML does ------------------------------------

_PATHS = st.sampled_from(["/dev/nvidia0", "/dev/x", "/sys", "/dev/nvi#a", "/dev/a b", "/var/log"])
_VALUE = st.one_of(
    _PATHS,
    _PATHS.map(lambda p: f"'{p}'"),
    _PATHS.map(lambda p: f'"{p}"'),
    _PATHS.map(lambda p: f"{p} # note"),
    st.sampled_from(["", "~", "null", "195", "c", "!!str /dev/nvidia0", "&a /x", "*a", "|", ">-"]),
    st.sampled_from(['"\\x2fdev"', "'it''s'", "a: b", "[rbind, ro]", "{a: 1}", "- x", "-x"]),
)
_KEYS = st.sampled_from(["path", "source", "type", "major", "options", "<<", '"path"'])


@st.composite
def _documents(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        indent = " " * draw(st.sampled_from([0, 2]))
        first = True
        for _ in range(draw(st.integers(1, 3))):
            key, value = draw(_KEYS), draw(_VALUE)
            lead = f"{indent}- " if first else f"{indent}{' ' * draw(st.sampled_from([1, 2, 4]))}"
            lines.append(f"{lead}{key}: {value}".rstrip())
            first = False
        if draw(st.booleans()):
            lines.append(f"{indent}  # a comment")
    return "\n".join(lines) + "\n"


@settings(max_examples=600, deadline=None, derandomize=True)
@given(_documents())
def test_what_the_reader_takes_it_reads_as_yaml_does(text: str) -> None:
    try:
        mine = read_value(text)
    except Unreadable:
        return
    try:
        theirs = yaml.safe_load(text) or []
    except yaml.YAMLError:
        return  # the plugin's YAML reader refuses it too: nothing is injected
    assert isinstance(theirs, list) and len(theirs) == len(mine), (text, mine, theirs)
    for a, b in zip(mine, theirs, strict=True):
        if not isinstance(a, dict):
            continue
        assert isinstance(b, dict), (text, mine, theirs)
        for key in ("path", "source", "type"):
            if isinstance(b.get(key), str):
                assert a.get(key) == b[key], (text, mine, theirs)
            elif isinstance(a.get(key), str) and a[key].startswith("/"):
                raise AssertionError((text, mine, theirs))


def test_nothing_is_read_of_pods_without_such_annotations() -> None:
    assert injections({"app": "x", "devicesX.gke.io/pod": "- path: /dev/nvidia0"}) == []
