"""Golden cases: each folder under tests/golden is one object admitted end to end over HTTPS.

`input.yaml` is the object, `request.yaml` (optional) the request facts, `expected.yaml` the
verdict, the rules that deny or warn, and the whole object after the patch is applied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Webhook, schema_problems

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p for p in GOLDEN.iterdir() if (p / "input.yaml").exists())


def _load(case: Path, name: str) -> Any:
    path = case / name
    return yaml.safe_load(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_case_is_admitted_as_expected(webhook: Webhook, case: Path) -> None:
    obj = _load(case, "input.yaml")
    request = _load(case, "request.yaml") or {}
    expected = _load(case, "expected.yaml")

    mutated, mutation, verdict = webhook.admit(obj, **request)

    if expected.get("unchanged"):
        assert mutation.patch == []
    else:
        assert mutated == expected["mutated"]
    assert verdict.allowed is expected["allowed"]
    assert verdict.denied_rules == set(expected["denied"])
    assert verdict.warned_rules == set(expected["warned"])
    for text in expected.get("messages", []):
        assert text in verdict.message + "\n".join(verdict.warnings)
    # The patch never breaks the schema: the result has no error the input did not have
    # (KServe's predictor with only a `model` is not a full PodSpec on its own).
    assert set(schema_problems(mutated)) <= set(schema_problems(obj))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mutating_the_patched_object_again_adds_nothing(webhook: Webhook, case: Path) -> None:
    """Reinvocation (reinvocationPolicy: IfNeeded) must be a no-op on our own output."""
    obj = _load(case, "input.yaml")
    request = _load(case, "request.yaml") or {}
    mutated = webhook.mutate(obj, **request).apply(obj)
    assert webhook.mutate(mutated, **request).patch == []
