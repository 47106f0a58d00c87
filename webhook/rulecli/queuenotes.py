"""What `rules explain` says of the batch queues: whether a queue keeps the namespace's GPUs."""

from __future__ import annotations

from webhook.ruleset.rulemodels import QueueRule

__all__ = ["queue_lines"]


def queue_lines(rule: QueueRule) -> list[str]:
    """One line or two for `rules explain`: who keeps the GPUs of workloads that go through a
    queue, and what the webhook does about it. Nothing while gpu-queue is off."""
    if rule.mode == "off":
        return []
    labels = ", ".join([*rule.kueue_labels, *rule.kai_labels]) or "(none)"
    lines = [
        f"queue: gpu-queue ({rule.mode}): GPU workloads here go through a batch queue (labels "
        f"{labels}); the queue keeps their GPUs (a Kueue ClusterQueue's nominalQuota + "
        "borrowingLimit, a KAI queue's quota and limit) and admits them when they fit; the "
        "webhook refuses a queue that does not exist or could never admit them"
    ]
    if rule.mutate:
        default = (
            f"LocalQueue {rule.default_queue!r}"
            if rule.default_queue
            else "the namespace's LocalQueue named 'default', else its only LocalQueue"
        )
        lines.append(f"queue: a GPU workload that names no queue is labelled with {default}")
    return lines
