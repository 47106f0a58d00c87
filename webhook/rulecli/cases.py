"""Platform teams' own test cases for their rule edits: an object in, the expected verdict out.

A case file holds `cases:`; each case gives an object (or a whole AdmissionReview), optional
namespace facts, and what must come out: allowed or not, which rules deny, warn or audit, and
optionally the whole object after mutation. The engine evaluates exactly what the webhook would.

The cases run against the rule folder under test, unless the file says `ruleSet: built-in`:
then they describe the built-in defaults (the shipped `rules/tests/defaults.yaml` does), and a
team's own rule file beside the shipped one cannot turn them red.

Cluster facts come from a `clusterSnapshot` of the case or of its file, or the command line's
(`casefacts`). Without any, the rules that need facts judge only what needs none (the allowed
priority classes); a case that fails only because a rule needing facts did not fire is
reported as not checked, not as failed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from webhook.engine.admit import Decided, Request, admit
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.decision import Decision
from webhook.facts.snapshotfile import SnapshotError, StaticSnapshot
from webhook.modelerrors import Invalid, problems
from webhook.rulecli.casefacts import SnapshotRef, facts_of
from webhook.ruleset.files import located_in
from webhook.ruleset.models import RULE_IDS
from webhook.yamlinput import YamlFileError, read_document

__all__ = ["CaseResult", "load_cases", "run_case"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)


class Expect(_Model):
    allowed: bool | None = None
    denied: list[str] | None = None  # rule ids in enforce mode that fire
    warned: list[str] | None = None
    audited: list[str] | None = None
    patched: bool | None = None  # whether any patch is expected at all
    object: dict[str, Any] | None = None  # the whole object after the patch

    @field_validator("denied", "warned", "audited")
    @classmethod
    def _known_rules(cls, value: list[str] | None) -> list[str] | None:
        """A rule id no rule has can never fire: the case could only ever fail."""
        for k, rule in enumerate(value or []):
            if rule not in RULE_IDS:
                near = difflib.get_close_matches(rule, RULE_IDS, n=1)
                hint = f"did you mean {near[0]}? " if near else ""
                raise Invalid(
                    f"{rule!r} is not a rule id",
                    f"{hint}The rule ids are: {', '.join(RULE_IDS)}",
                    (k,),
                )
        return value


class Case(_Model):
    name: str = Field(min_length=1)
    namespace: str = "default"
    namespace_labels: dict[str, str] | None = None
    operation: Literal["CREATE", "UPDATE"] = "CREATE"
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    review: dict[str, Any] | None = None  # a whole AdmissionReview instead of object
    # Cluster facts for this case: a snapshot file (relative to the test file) or inline.
    cluster_snapshot: SnapshotRef | None = None
    expect: Expect

    @model_validator(mode="after")
    def _one_input(self) -> Case:
        if (self.object is None) == (self.review is None):
            raise ValueError("give exactly one of object or review")
        return self

    def request(self) -> Request:
        """The request the webhook would see: the review's, or a CREATE (or UPDATE) of the
        object in the case's namespace."""
        if self.review is not None:
            request = self.review.get("request") or {}
            gvk = request.get("kind") or {}
            return Request(
                group=gvk.get("group", ""),
                kind=gvk.get("kind", ""),
                operation=request.get("operation", "CREATE"),
                namespace=request.get("namespace") or self.namespace,
                subresource=request.get("subResource") or "",
                obj=request.get("object"),
                old_obj=request.get("oldObject"),
                namespace_labels=self.namespace_labels,
                user=_username(request.get("userInfo")),
            )
        return Request(
            operation=self.operation,
            namespace=self.namespace,
            obj=self.object or {},
            old_obj=self.old_object,
            namespace_labels=self.namespace_labels,
        )


def _username(info: object) -> str:
    """A review's userInfo.username: whose request it is (the workload exemptions read it)."""
    name = info.get("username") if isinstance(info, dict) else None
    return name if isinstance(name, str) else ""


class CaseFile(_Model):
    # The rules the cases assume: the folder under test, or the built-in defaults.
    rule_set: Literal["folder", "built-in"] = "folder"
    # Cluster facts for every case of the file that names none of its own.
    cluster_snapshot: SnapshotRef | None = None
    cases: list[Case]


@dataclass(frozen=True)
class Found:
    """A case, the file it came from, and the rules it assumes."""

    source: str
    case: Case
    rule_set: Literal["folder", "built-in"]
    facts: StaticSnapshot | None = None  # None: judged without cluster facts


@dataclass
class CaseResult:
    source: str
    name: str
    failures: list[str] = field(default_factory=list)
    # Not judged: rules it expects need cluster facts it was not given (the failures say what).
    unchecked: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures


def load_cases(
    paths: list[Path], facts: StaticSnapshot | None = None
) -> tuple[list[Found], list[str]]:
    """Every case of every file, each with its facts (the case's, its file's, else `facts`);
    problems are reported, not raised, so one bad file can't hide the results of the others."""
    cases: list[Found] = []
    unread: list[str] = []
    read: dict[Path, StaticSnapshot] = {}
    for path in paths:
        try:
            data = read_document(path)
            if isinstance(data, dict) and data.get("kind") == "ClusterSnapshot":
                continue  # the facts some case names, kept beside the cases
            loaded = CaseFile.model_validate(data)
            ref = loaded.cluster_snapshot
            in_file = facts_of(ref, path, "clusterSnapshot", read) if ref is not None else facts
            for i, c in enumerate(loaded.cases):
                mine = c.cluster_snapshot
                at = f"cases.{i}.clusterSnapshot"
                own = facts_of(mine, path, at, read) if mine is not None else in_file
                cases.append(Found(str(path), c, loaded.rule_set, own))
        except SnapshotError as exc:
            unread.append(f"{path}: {exc}")
        except YamlFileError as exc:
            unread.append(str(exc))
        except ValidationError as exc:
            found = problems(exc.errors(include_url=False), CaseFile)
            unread.extend(located_in(path, found))
    return cases, unread


def _compare(label: str, expected: list[str] | None, actual: set[str]) -> list[str]:
    if expected is None or set(expected) == actual:
        return []
    return [f"{label}: expected {sorted(expected)}, got {sorted(actual)}"]


def _diff(expected: Any, actual: Any) -> str:
    lines = difflib.unified_diff(
        yaml.safe_dump(expected, sort_keys=True).splitlines(),
        yaml.safe_dump(actual, sort_keys=True).splitlines(),
        "expected",
        "actual",
        lineterm="",
    )
    return "\n".join("    " + line for line in lines)


def run_case(
    source: str, case: Case, rules: CompiledRuleSet, facts: StaticSnapshot | None = None
) -> CaseResult:
    result = CaseResult(source, case.name)
    request = case.request()
    admitted = admit(request, rules, facts)
    # A request the webhook skips is allowed untouched.
    outcome = admitted.decision if isinstance(admitted, Decided) else Decision(mutated=request.obj)
    if outcome.unreadable is not None:
        result.failures.append(
            f"the object cannot be read: {outcome.unreadable.path}: {outcome.unreadable.problem}"
        )
        return result
    exp = case.expect
    rules_by_verdict = {
        "denied": {f.rule for f in outcome.denials},
        "warned": {f.rule for f in outcome.warnings},
        "audited": {f.rule for f in outcome.audits},
    }
    if exp.allowed is not None and exp.allowed != outcome.allowed:
        why = "; ".join(f.summary for f in outcome.denials) or "nothing denied it"
        result.failures.append(f"allowed: expected {exp.allowed}, got {outcome.allowed} ({why})")
    for label in ("denied", "warned", "audited"):
        result.failures += _compare(label, getattr(exp, label), rules_by_verdict[label])
    if exp.patched is not None and exp.patched != bool(outcome.patch):
        result.failures.append(f"patched: expected {exp.patched}, got {bool(outcome.patch)}")
    if exp.object is not None and exp.object != outcome.mutated:
        result.failures.append(
            "object after mutation differs:\n" + _diff(exp.object, outcome.mutated)
        )
    if result.failures and facts is None:
        # The rules in force in the case's namespace that need facts.
        needing = set(
            rules.for_namespace(request.namespace, request.namespace_labels).cluster_rules
        )
        shaped = len(result.failures) == len(
            [f for f in result.failures if not f.startswith(("patched:", "object after"))]
        )
        wanting = _for_want_of_facts(exp, rules_by_verdict, outcome.allowed, needing)
        if shaped and wanting:
            result.unchecked = True
            result.failures = [
                f"{', '.join(sorted(wanting))} cannot judge this case without cluster facts "
                "(what it expects needs them)"
            ]
    return result


def _for_want_of_facts(
    exp: Expect, actual: dict[str, set[str]], allowed: bool, needing: set[str]
) -> set[str]:
    """The rules needing facts that a case failed for want of, when every way it failed comes
    from them (empty otherwise): each rule expected and missing is one of them, nothing fired
    that was not expected, and a denial expected and not given could have come from them."""
    wanting: set[str] = set()
    for label, fired in actual.items():
        expected = getattr(exp, label)
        if expected is None:
            continue
        missing = set(expected) - fired
        if fired - set(expected) or not missing <= needing:
            return set()
        wanting |= missing
    if exp.allowed is None or exp.allowed == allowed:
        return wanting
    if exp.allowed or not needing:
        return set()  # a denial nothing expected is no missing fact
    if exp.denied is None:
        return wanting or needing
    return wanting if (set(exp.denied) - actual["denied"]) & needing else set()
