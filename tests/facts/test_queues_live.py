"""The live cache reads Kueue's and KAI's queues from an API server speaking the real list/watch
protocol: optional kinds (404: not installed, known and empty; 403: unknown), never holding up
`synced`, reduced to what gpu-queue reads, and acted on by the rule at once."""

from __future__ import annotations

from typing import Any

from tests.support.cluster import cluster_queue, local_queue
from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import cluster_role_grants, eventually, live_cache
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts.live import LiveCache
from webhook.facts.queues import QueueFacts
from webhook.facts.watched import QUEUE_KINDS
from webhook.ruleset.models import RuleSet


def queues_of(live: LiveCache, ns: str = "ml-team") -> QueueFacts | None:
    return live.facts_for(ns).queues


def job(queue: str | None, gpus: int = 1, parallelism: int = 1) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                }
            },
        },
    }


def test_queues_are_listed_then_followed_by_the_watch(server: FakeApiServer) -> None:
    server.load("localqueues", [local_queue("user-queue", "team-a-cq")])
    server.load("clusterqueues", [cluster_queue("team-a-cq", 8, 8)])
    server.load(
        "queues",
        [{"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}}],
    )
    live = live_cache(server)
    live.start()
    try:
        assert live.wait_synced(10)
        eventually(lambda: (q := queues_of(live)) is not None and q.local_queues is not None)
        eventually(lambda: queues_of(live).cluster_queues is not None)  # type: ignore[union-attr]
        # each kind has its own watch: KAI's queues may arrive after Kueue's
        eventually(lambda: queues_of(live).kai_leaves() == ["q"])  # type: ignore[union-attr]
        facts = queues_of(live)
        assert facts is not None
        assert facts.local_queues == {"user-queue": "team-a-cq"}
        assert facts.kai_leaves() == ["q"]
        server.put("localqueues", local_queue("default", "team-a-cq"))
        eventually(lambda: set(queues_of(live).local_queues or ()) == {"user-queue", "default"})  # type: ignore[union-attr]
        assert facts.local_queues == {"user-queue": "team-a-cq"}  # a value handed out stays
        server.delete("localqueues", "ml-team", "user-queue")
        eventually(lambda: set(queues_of(live).local_queues or ()) == {"default"})  # type: ignore[union-attr]
        assert queues_of(live, "other").local_queues == {}  # type: ignore[union-attr]
    finally:
        live.stop()


def test_kueue_not_installed_is_known_empty_and_forbidden_unknown(server: FakeApiServer) -> None:
    server.missing.update({"localqueues", "clusterqueues", "resourceflavors", "queues"})
    live = live_cache(server)
    live.list_once()  # the live audit's one-shot read: `audit --cluster`
    facts = queues_of(live)
    assert facts is not None and facts.local_queues == {} and facts.kai_queues == {}

    server.missing.clear()
    server.forbidden.add("localqueues")
    again = live_cache(server)
    again.list_once()
    facts = queues_of(again)
    assert facts is not None and facts.local_queues is None  # not readable: unknown
    assert facts.kai_queues == {}


def test_the_rule_acts_on_live_queues(server: FakeApiServer) -> None:
    server.load("namespaces", [{"metadata": {"name": "ml-team", "labels": {}}}])
    server.load("localqueues", [local_queue("user-queue", "team-a-cq")])
    server.load("clusterqueues", [cluster_queue("team-a-cq", 8, 8)])
    live = live_cache(server)
    live.list_once()
    rules = compile_rules(RuleSet.model_validate({"rules": {"gpu-queue": {"mode": "enforce"}}}))

    def decide(obj: dict[str, Any]) -> Any:
        subject = subject_for(obj, namespace="ml-team", group="batch", kind="Job")
        return evaluate(subject, rules, live.facts_for("ml-team"), stage=Stage.ADMIT)

    missing = decide(job("team-queue"))
    assert not missing.allowed
    assert "LocalQueue team-queue, which does not exist" in missing.message()
    assert "LocalQueues in ml-team: user-queue" in missing.message()
    labelled = decide(job(None))
    assert labelled.allowed
    assert {
        "op": "add",
        "path": "/metadata/labels/kueue.x-k8s.io~1queue-name",
        "value": "user-queue",
    } in labelled.patch
    over = decide(job("user-queue", gpus=8, parallelism=3))
    assert over.allowed  # a Job is no gang: warned
    assert any("gives at most 16 nvidia.com/gpu" in w for w in over.warning_lines())


def test_the_webhook_may_list_and_watch_every_queue_kind() -> None:
    grants = cluster_role_grants()
    for kind in QUEUE_KINDS:
        plural = kind.name.partition(".")[0]
        assert grants[(kind.group, plural)] == {"get", "list", "watch"}
