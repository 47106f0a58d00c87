"""/metrics tells an operator what the webhook did: verdicts per rule, shadow-mode findings."""

from __future__ import annotations

import re
from typing import Any

from tests.support.pods import VIOLATION
from tests.support.webhook import Webhook


def metric(hook: Webhook, name: str, **labels: str) -> float:
    text = hook.client.get(f"{hook.url}/metrics").text
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    return 0.0


def test_denials_and_patches_are_counted(webhook: Webhook) -> None:
    before = metric(webhook, "gpu_admission_findings_total", rule="privileged-gpu", verdict="deny")
    assert not webhook.validate(VIOLATION).allowed
    webhook.mutate(VIOLATION)
    after = metric(webhook, "gpu_admission_findings_total", rule="privileged-gpu", verdict="deny")
    assert after == before + 1
    assert (
        metric(
            webhook,
            "gpu_admission_requests_total",
            endpoint="validate",
            kind="Pod",
            result="denied",
        )
        >= 1
    )
    assert (
        metric(
            webhook, "gpu_admission_requests_total", endpoint="mutate", kind="Pod", result="patched"
        )
        >= 1
    )
    text = webhook.client.get(f"{webhook.url}/metrics").text
    assert 'gpu_admission_request_seconds_count{endpoint="validate"}' in text


def test_shadow_mode_records_what_it_would_have_denied(webhook_with: Any) -> None:
    hook: Webhook = webhook_with({}, mode="audit")
    assert hook.validate(VIOLATION).allowed
    assert metric(hook, "gpu_admission_findings_total", rule="privileged-gpu", verdict="audit") == 1
    assert metric(hook, "gpu_admission_rule_reloads_total", result="loaded") == 1


def test_latency_buckets_count_as_prometheus_does_bounds_included() -> None:
    from webhook.server.metrics import _Tally

    tally = _Tally()
    for seconds in (0.0005, 0.0007, 2.0):
        tally.observe("validate", seconds)
    (histogram,) = [f for f in tally.collect() if f.name == "gpu_admission_request_seconds"]
    buckets = {
        s.labels["le"]: s.value
        for s in histogram.samples
        if s.name.endswith("_bucket") and s.labels["endpoint"] == "validate"
    }
    assert buckets["0.0005"] == 1  # le: a value on the bound falls in that bucket
    assert buckets["0.001"] == 2
    assert buckets["1.0"] == 2 and buckets["+Inf"] == 3
    counts = {s.labels["endpoint"]: s.value for s in histogram.samples if s.name.endswith("_count")}
    assert counts == {"mutate": 0, "validate": 3}  # both exist from the start
    (total,) = [
        s.value
        for s in histogram.samples
        if s.name.endswith("_sum") and s.labels["endpoint"] == "validate"
    ]
    assert total == 2.0012
