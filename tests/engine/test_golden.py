"""Golden cases: each folder under tests/golden is one object, its request and the verdict.

Every case runs in process through `engine.admit`, as the webhook calls it: the same skips,
the same fast path (on the object's compact bytes), `Stage.ADMIT` (mutate, apply the patch,
validate the patched object: what the apiserver does with /mutate and /validate). The few
cases named in END_TO_END also go through the real server over HTTPS.

A case folder holds:

- `input.yaml`: the object.
- `request.yaml` (optional): the keywords of `tests.support.reviews.review_for`: user (the
  requester's username, default alice@example.com), namespace (default ml-team), operation,
  old, kind, dry_run, subresource (e.g. ephemeralcontainers).
- `rules.yaml` (optional): a whole rule file, loaded on its own instead of the shipped `rules/`.
- `cluster.yaml` (optional): a `gpu-admission.io/v1` ClusterSnapshot; without one the
  cluster-aware rules do not run (the webhook started with no source of facts). Most cases
  judged with facts link it to tests/golden/cluster.yaml, the shared cluster; a case whose
  cluster differs has a file of its own.
- `expected.yaml`: `allowed`; `denied`, `warned` and optionally `audited` (rule ids);
  `unchanged: true` (no patch) or `mutated` (the whole object after the patch); `messages`
  (strings found in the denial message and warnings); `absent` (strings never found there: a
  Fix that must not send anyone somewhere that leads nowhere); `unreadable` (the field path of an
  object the engine refuses to read).
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.support.paths import GOLDEN, ROOT
from tests.support.reviews import ALICE
from tests.support.schema import schema_problems
from tests.support.webhook import Webhook, start_webhook, stop_webhook
from webhook.engine.admit import Decided, Fast, Request, Skipped, admit
from webhook.engine.compiled import CompiledRuleSet, compile_rules
from webhook.engine.decision import Decision
from webhook.engine.pipeline import Stage
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

CASES = sorted(p for p in GOLDEN.iterdir() if (p / "input.yaml").exists())
IDS = [c.name for c in CASES]

# Also admitted over HTTPS by the real server: a Pod, a Deployment, CRDs, a denial, warnings,
# and one with cluster facts (the server reads the case's cluster.yaml as its snapshot).
END_TO_END = {
    "pod-gpu-in-requests-only",
    "deployment-template-patched",
    "raycluster-gpu-worker-group-patched",
    "pod-fractional-gpu-denied",
    "pod-no-memory-limit-no-probes",
    "priority-default-class-injected-pod",
    # GPU access and autoscaled pools, as the apiserver would meet them
    "access-non-gpu-sidecar-in-gpu-pod-gets-void",
    "access-envfrom-configmap-all-denied",
    "access-ephemeral-container-visible-devices-all-denied",
    "schedulable-all-gpu-pools-at-zero-warned",
    "schedulable-karpenter-nodepool-fits",
    "schedulable-karpenter-product-no-nodepool-allows-denied",
    # DRA: claims resolved through the snapshot, quota in devices, no facts
    "dra-claim-template-pod-patched",
    "dra-claim-name-pod-patched",
    "dra-device-class-extended-resource-schedulable",
    "dra-quota-native-devices-exceeded-denied",
    "dra-deployment-claim-template-patched",
    "dra-claims-without-facts-warned-not-denied",
    # KServe runtimes read from the snapshot; a device plugin's denial
    "shm-kserve-runtime-provides-shm",
    "access-device-plugin-nvidia-in-user-namespace-denied",
    # workload kinds: one declared in a rule file, shipped CRDs, a cluster-scoped one
    "workloads-declared-crd-patched",
    "trainjob-half-gpu-per-node-denied",
    "llminferenceservice-gpu-template-gets-toleration-not-shm",
    "clusterservingruntime-keeps-its-shm-worker-spec-patched",
}

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_Loader) if path.exists() else None


@dataclass(frozen=True)
class Case:
    """One golden folder, read."""

    path: Path
    obj: Any
    request: dict[str, Any]
    expected: dict[str, Any]
    rules: Path | None = None  # the case's own rules.yaml
    cluster: Path | None = None  # the case's cluster.yaml
    messages: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return str(self.request.get("namespace", "ml-team"))

    @property
    def operation(self) -> str:
        return str(self.request.get("operation", "CREATE"))

    def engine_request(self, obj: Any, *, raw: bool) -> Request:
        """The engine's request for the review `review_for` sends; with `raw`, the object's
        bytes too, compact as the apiserver writes them (the fast path reads them)."""
        return Request(
            kind=self.request.get("kind"),
            operation=self.operation,
            namespace=self.namespace,
            subresource=str(self.request.get("subresource", "")),
            obj=obj,
            old_obj=self.request.get("old"),
            raw=json.dumps(obj, separators=(",", ":")).encode() if raw else None,
            user=str(self.request.get("user", ALICE)),
        )


@functools.cache
def load_case(path: Path) -> Case:
    rules, cluster = path / "rules.yaml", path / "cluster.yaml"
    expected = _read(path / "expected.yaml")
    return Case(
        path=path,
        obj=_read(path / "input.yaml"),
        request=_read(path / "request.yaml") or {},
        expected=expected,
        rules=rules if rules.exists() else None,
        cluster=cluster if cluster.exists() else None,
        messages=list(expected.get("messages", [])),
        absent=list(expected.get("absent", [])),
    )


@functools.cache
def _compiled(rule_file: Path | None) -> CompiledRuleSet:
    """The shipped rules, or a case's rule file loaded on its own (as a one-file rule folder)."""
    if rule_file is None:
        return compile_rules(load_rules(ROOT / "rules"))
    with tempfile.TemporaryDirectory(prefix="golden-rules-") as tmp:
        folder = Path(tmp)
        (folder / "rules.yaml").write_text(rule_file.read_text())
        return compile_rules(load_rules(folder))


@functools.cache
def _snapshot(cluster: Path) -> Any:
    return load_snapshot(cluster)


def _source(case: Case) -> Any:
    return _snapshot(case.cluster) if case.cluster else None


def decide(case: Case, obj: Any, stage: Stage) -> Decision:
    """The engine's decision as the webhook reaches it: requests it skips and objects the fast
    path lets through get no decision (allowed, untouched)."""
    rules, source = _compiled(case.rules), _source(case)
    outcome = admit(case.engine_request(obj, raw=True), rules, source, stage=stage)
    if isinstance(outcome, Fast):
        # The fast path must never hide a finding or a patch the full path would make.
        full = admit(case.engine_request(obj, raw=False), rules, source, stage=stage)
        assert isinstance(full, Decided), full
        decision = full.decision
        assert decision.unreadable is not None or not (decision.patch or decision.judged), (
            f"the fast path skips an object the engine judges: {decision}"
        )
        return Decision()
    if isinstance(outcome, Skipped):
        return Decision()
    return outcome.decision


def _rules_of(findings: Any) -> set[str]:
    return {f.rule for f in findings}


def _text(decision: Decision) -> str:
    lines = [decision.message(), *decision.warning_lines()]
    if decision.unreadable is not None:
        lines.append(decision.unreadable.message())
    return "\n".join(lines)


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_golden_case_is_decided_as_expected(path: Path) -> None:
    case = load_case(path)
    expected = case.expected
    before = copy.deepcopy(case.obj)
    decision = decide(case, case.obj, Stage.ADMIT)
    assert case.obj == before, "the engine edited the object it was given"
    mutated = decision.mutated if decision.mutated is not None else case.obj

    if expected.get("unchanged"):
        assert list(decision.patch) == []
    else:
        assert mutated == expected["mutated"]
    assert decision.allowed is expected["allowed"], _text(decision)
    assert _rules_of(decision.denials) == set(expected["denied"]), _text(decision)
    assert _rules_of(decision.warnings) == set(expected["warned"]), _text(decision)
    if "audited" in expected:
        assert _rules_of(decision.audits) == set(expected["audited"])
    if "unreadable" in expected:
        assert decision.unreadable is not None
        assert decision.unreadable.path == expected["unreadable"]
    else:
        assert decision.unreadable is None, decision.unreadable
    text = _text(decision)
    for message in case.messages:
        assert message in text
    for message in case.absent:
        assert message not in text, text
    # The patch never breaks the schema: the result has no error the input did not have
    # (KServe's predictor with only a `model` is not a full PodSpec on its own).
    if decision.patch:
        table = _compiled(case.rules).workloads
        assert set(schema_problems(mutated, table)) <= set(schema_problems(case.obj, table))


@pytest.mark.parametrize("path", CASES, ids=IDS)
def test_mutating_the_patched_object_again_adds_nothing(path: Path) -> None:
    """Reinvocation (reinvocationPolicy: IfNeeded) must be a no-op on our own output."""
    case = load_case(path)
    patch = list(decide(case, case.obj, Stage.MUTATE).patch)
    mutated = jsonpatch.apply_patch(case.obj, patch) if patch else case.obj
    assert list(decide(case, mutated, Stage.MUTATE).patch) == []


# ---- end to end: the same cases through the real server over HTTPS ----


@pytest.fixture(scope="module")
def server_for(
    request: pytest.FixtureRequest, certs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[Case], Webhook]]:
    """The server a case needs: the shared one for the shipped rules and no cluster facts,
    else one started with the case's rule file and snapshot (one per distinct pair)."""
    started: dict[tuple[Path | None, Path | None], Webhook] = {}

    def get(case: Case) -> Webhook:
        if case.rules is None and case.cluster is None:
            hook: Webhook = request.getfixturevalue("webhook")
            return hook
        key = (case.rules, case.cluster)
        if key not in started:
            folder = tmp_path_factory.mktemp("rules")
            source = case.rules or ROOT / "rules" / "gpu-admission.yaml"
            (folder / "rules.yaml").write_text(source.read_text())
            extra = ("--cluster-snapshot", str(case.cluster)) if case.cluster else ()
            log = tmp_path_factory.mktemp("log") / "server.log"
            started[key] = start_webhook(certs, folder, log, *extra)
        return started[key]

    yield get
    for hook in started.values():
        stop_webhook(hook)


E2E_CASES = [c for c in CASES if c.name in END_TO_END]


def test_end_to_end_cases_exist() -> None:
    assert {c.name for c in E2E_CASES} == END_TO_END


@pytest.mark.parametrize("path", E2E_CASES, ids=[c.name for c in E2E_CASES])
def test_golden_case_is_admitted_over_https(server_for: Any, path: Path) -> None:
    case = load_case(path)
    expected = case.expected
    hook = server_for(case)

    if "unreadable" in expected:
        answer = hook.mutate(case.obj, **case.request)
        assert not answer.allowed
        assert expected["unreadable"] in answer.message
        return
    mutated, mutation, verdict = hook.admit(case.obj, **case.request)

    if expected.get("unchanged"):
        assert mutation.patch == []
    else:
        assert mutated == expected["mutated"]
    assert verdict.allowed is expected["allowed"]
    assert verdict.denied_rules == set(expected["denied"])
    assert verdict.warned_rules == set(expected["warned"])
    if "audited" in expected:
        annotations = verdict.raw.get("auditAnnotations") or {}
        assert {r for r, v in annotations.items() if v == "audit"} == set(expected["audited"])
    for text in case.messages:
        assert text in verdict.message + "\n".join(verdict.warnings)
    table = _compiled(case.rules).workloads
    assert set(schema_problems(mutated, table)) <= set(schema_problems(case.obj, table))
    # Reinvocation over HTTPS too.
    assert hook.mutate(mutated, **case.request).patch == []
