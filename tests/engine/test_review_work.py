"""A review's work grows with its size, never with its size squared: facts about the whole pod
(does it look like a node agent?) are worked out once per pod, not once per finding.

Counted, never timed: bench/worst_shapes.py measures the time of the worst shapes.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.paths import ROOT
from webhook.engine.build import engine_build
from webhook.engine.checks import isolation
from webhook.engine.compiled import compile_rules
from webhook.engine.decision import MAX_DENIALS
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.ruleset.models import RuleSet

RULES = compile_rules(RuleSet())
VISIBLE = "NVIDIA_VISIBLE_DEVICES"


class CountingLabels(dict[str, Any]):
    """Pod labels that count how often the whole set is walked."""

    walks = 0

    def items(self) -> Any:
        CountingLabels.walks += 1
        return super().items()


def _daemonset(containers: int, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    """The worst shape for node-agent advice: every container a finding in a DaemonSet."""
    spec = {
        "containers": [
            {
                "name": f"c{i}",
                "image": "example.com/agent:1",
                "securityContext": {"privileged": True},
                "env": [{"name": VISIBLE, "value": "all"}],
            }
            for i in range(containers)
        ],
        "tolerations": [{"operator": "Exists"}],
    }
    template = {"metadata": {"labels": labels if labels is not None else {}}, "spec": spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "default"},
        "spec": {"template": template},
    }


def _denials(obj: dict[str, Any], stage: Stage = Stage.ADMIT) -> int:
    decision = evaluate(subject_for(obj), RULES, stage=stage)
    return len(decision.denials)


def test_pod_labels_walked_once_however_many_findings() -> None:
    """Each finding's fix says whether the pod looks like a node agent; the pod's labels,
    images and volumes are read for that once, not once per finding (which made a DaemonSet of
    C containers cost C² work)."""
    walks = []
    for containers in (10, 40):
        CountingLabels.walks = 0
        labels = CountingLabels({"app": "agent"})
        assert _denials(_daemonset(containers, labels), Stage.VALIDATE) == 2 * containers
        walks.append(CountingLabels.walks)
    assert walks[0] == walks[1], walks
    assert walks[1] <= 2


@pytest.mark.skipif(
    engine_build() == "mypyc",
    reason="counts calls by replacing a function, which compiled callers never see; the "
    "interpreted run of the same source checks it",
)
def test_node_agent_decided_once_per_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    real = isolation.node_agent

    def counting(pod: Any, dirs: tuple[str, ...] = isolation.KUBELET_SOCKET_DIRS) -> str | None:
        calls.append(dirs)
        return real(pod, dirs)

    monkeypatch.setattr(isolation, "node_agent", counting)
    assert _denials(_daemonset(200)) == 400
    # Once for the advice in every fix, once for whether `void` may be added (GPU evidence).
    assert len(calls) <= 2, len(calls)


def test_node_agent_advice_unchanged() -> None:
    """The advice is the same as before it was kept: the exemption first, naming why."""
    decision = evaluate(subject_for(_daemonset(3, {"app": "dcgm-exporter"})), RULES)
    fixes = {f.fix for f in decision.denials}
    assert len(decision.denials) == 6
    assert all("label app=dcgm-exporter" in fix for fix in fixes)
    assert all(fix.startswith("exempt it in the rule set with") for fix in fixes)


def test_a_denial_names_at_most_max_denials_findings() -> None:
    """The answer's size is bounded too: thousands of findings are counted, not all spelled
    out (an audit of the object lists every one)."""
    decision = evaluate(subject_for(_daemonset(MAX_DENIALS)), RULES)
    lines = decision.message().splitlines()
    assert len(decision.denials) == 2 * MAX_DENIALS
    assert len(lines) == MAX_DENIALS + 1
    assert lines[-1] == (
        f"gpu-admission: {MAX_DENIALS} more denials not shown (gpu-admission audit lists every one)"
    )


def test_the_engine_gives_way_through_interpreted_code() -> None:
    """`give_way` lets a waiting thread in only because calling it enters the interpreter's eval
    loop: compiled, it would do nothing (setup.py must never list it)."""
    from webhook.engine import turns

    assert str(turns.__file__).endswith(".py"), turns.__file__
    assert "webhook/engine/turns.py" not in (ROOT / "setup.py").read_text()


def _device_volumes(volumes: int) -> dict[str, Any]:
    """A GPU pod whose host-path volumes each reach GPU device nodes: a finding per volume,
    each asking whether the pod asks for GPUs and fills every node it can run on."""
    containers: list[dict[str, Any]] = [{"name": f"c{i}", "image": "i"} for i in range(50)]
    containers.append({"name": "g", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "containers": containers,
            "volumes": [
                {"name": f"v{i}", "hostPath": {"path": f"/dev/nvidia{i}"}} for i in range(volumes)
            ],
        },
    }


@pytest.mark.skipif(
    engine_build() == "mypyc",
    reason="counts calls by replacing a function, which compiled callers never see; the "
    "interpreted run of the same source checks it",
)
def test_pod_wide_questions_are_asked_once_however_many_host_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether the pod asks for GPUs walks every container, and whether it fills every node
    walks every node of the cluster: asked per volume, a pod of many containers and many
    device volumes cost their product."""
    from webhook.engine.checks import schedulable
    from webhook.engine.views import ContainerView

    asked = {"gpu": 0, "nodes": 0}
    slot = ContainerView.__dict__["asks_gpu"]  # the slot: every read of a container's ask
    real_facts = schedulable.trusted_facts

    def read(view: ContainerView) -> bool:
        asked["gpu"] += 1
        return bool(slot.__get__(view))

    def trusted_facts(ctx: Any) -> Any:
        asked["nodes"] += 1
        return real_facts(ctx)

    monkeypatch.setattr(ContainerView, "asks_gpu", property(read, slot.__set__))
    monkeypatch.setattr(schedulable, "trusted_facts", trusted_facts)
    counts = []
    for volumes in (10, 40):
        asked.update(gpu=0, nodes=0)
        decision = evaluate(subject_for(_device_volumes(volumes)), RULES, stage=Stage.VALIDATE)
        assert len([f for f in decision.denials if f.rule == "host-gpu-devices"]) == volumes
        counts.append(dict(asked))
    assert counts[0] == counts[1], counts
