"""`gpu-admission review FILE` prints the AdmissionReview the apiserver would send, so that
posting it to a running webhook (the curl example of docs/try-locally.md) gets the real answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT
from tests.support.reviews import Answer
from tests.support.webhook import Webhook

GOLDEN = ROOT / "tests" / "golden"


def _review(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "review", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def _post(webhook: Webhook, endpoint: str, body: str) -> Answer:
    response = webhook.post(endpoint, body.encode())
    assert response.status_code == 200, response.text
    return Answer(response.json()["response"])


def test_the_printed_review_gets_the_webhooks_real_answer(webhook: Webhook) -> None:
    result = _review(str(GOLDEN / "pod-fractional-gpu-denied" / "input.yaml"))
    assert result.returncode == 0, result.stderr
    review: dict[str, Any] = json.loads(result.stdout)
    request = review["request"]
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"]["resource"] == "pods" and request["operation"] == "CREATE"
    answer = _post(webhook, "validate", result.stdout)
    assert review["request"]["uid"] == answer.raw["uid"]
    assert not answer.allowed and "gpu-whole-quantity" in answer.denied_rules


def test_a_crd_gets_its_plural_and_a_cluster_scoped_kind_no_namespace(tmp_path: Path) -> None:
    runtime = GOLDEN / "clusterservingruntime-keeps-its-shm-worker-spec-patched" / "input.yaml"
    request = json.loads(_review(str(runtime), "--namespace", "ml-team").stdout)["request"]
    assert request["resource"] == {
        "group": "serving.kserve.io",
        "version": "v1alpha1",
        "resource": "clusterservingruntimes",
    }
    assert request["namespace"] == ""


def test_an_update_carries_the_old_object_and_a_dry_run_says_so(tmp_path: Path) -> None:
    new = GOLDEN / "deployment-template-patched" / "input.yaml"
    result = _review(str(new), "--operation", "UPDATE", "--old", str(new), "--dry-run")
    request = json.loads(result.stdout)["request"]
    assert request["operation"] == "UPDATE" and request["dryRun"] is True
    assert request["oldObject"] == request["object"]
    assert request["options"]["kind"] == "UpdateOptions"
    missing = _review(str(new), "--operation", "UPDATE")
    assert missing.returncode == 2 and "--old FILE" in missing.stderr


def test_a_file_of_several_objects_is_refused_saying_so(tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    text = (GOLDEN / "pod-fractional-gpu-denied" / "input.yaml").read_text()
    two.write_text(text + "\n---\n" + text)
    result = _review(str(two))
    assert result.returncode == 2 and "holds 2 objects" in result.stderr


def test_validate_judges_the_mutated_object_as_the_apiserver_sends_it(webhook: Webhook) -> None:
    """A GPU only in requests: /validate of the object as written denies it, but the apiserver
    never sends that; it sends the object after /mutate copied the GPU into limits."""
    pod = str(GOLDEN / "pod-gpu-in-requests-only" / "input.yaml")
    as_written = _review(pod)
    assert not _post(webhook, "validate", as_written.stdout).allowed
    mutated = _review(pod, "--mutated")
    assert mutated.returncode == 0, mutated.stderr
    request = json.loads(mutated.stdout)["request"]
    limits = request["object"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"
    answer = _post(webhook, "validate", mutated.stdout)
    assert answer.allowed, answer.raw
    assert _post(webhook, "mutate", mutated.stdout).raw.get("patch") is None  # nothing left
