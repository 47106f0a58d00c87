"""The decision about one object, and the one place that says how findings combine.

A decision holds what the webhook would patch, every finding with the mode it was judged in,
and what an admitted pod will hold. Precedence lives here and nowhere else: deny beats warn
beats audit; an advisory finding (a rule that could not judge, or a controller whose pods are
judged later) never denies; warnings are capped to what kubectl users read and the apiserver
keeps. The webhook, the manifest audit and the rules tests only render a `Decision`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.engine.findings import Finding
from webhook.facts.model import PodGpus

__all__ = [
    "MAX_DENIALS",
    "MAX_WARNINGS",
    "Decision",
    "Judged",
    "Mode",
    "Unreadable",
    "Verdict",
    "combine",
]

# kubectl prints every warning on its own line; past a handful they stop being read.
MAX_WARNINGS = 5
# A denial names this many findings at most: a pod of thousands of containers would otherwise
# be answered with megabytes of text (an audit of the object lists every one).
MAX_DENIALS = 20


class Mode(StrEnum):
    """How a rule acts on what it finds. A rule file spells these as strings."""

    OFF = "off"
    AUDIT = "audit"
    WARN = "warn"
    ENFORCE = "enforce"

    def under(self, ceiling: Mode) -> Mode:
        """This mode under a rule set's global ceiling (`mode: audit` is shadow mode)."""
        return self if _RANK[self] <= _RANK[ceiling] else ceiling

    @property
    def verdict(self) -> Verdict:
        return _VERDICT[self]


class Verdict(StrEnum):
    """What a finding does to the request: deny it, warn the user, or only record it."""

    DENY = "deny"
    WARN = "warn"
    AUDIT = "audit"


_RANK = {Mode.OFF: 0, Mode.AUDIT: 1, Mode.WARN: 2, Mode.ENFORCE: 3}
_VERDICT = {Mode.ENFORCE: Verdict.DENY, Mode.WARN: Verdict.WARN, Mode.AUDIT: Verdict.AUDIT}
_STRENGTH = {Verdict.DENY: 0, Verdict.WARN: 1, Verdict.AUDIT: 2}


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False, unsafe_hash=True)
class Judged:
    """A finding with the mode it was judged in: enforce denies, warn and audit only report."""

    finding: Finding
    mode: Mode

    def __init__(self, finding: Finding, mode: Mode) -> None:
        self.finding = finding
        self.mode = mode

    @property
    def verdict(self) -> Verdict:
        return _VERDICT[self.mode]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """The object has a field of a type no Kubernetes object could have there."""

    kind: str
    path: str
    problem: str

    def message(self) -> str:
        return f"cannot read the {self.kind}: {self.path}: {self.problem}"


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False)
class Decision:
    """Everything decided about one object. Built by `combine`; never changed afterwards."""

    patch: tuple[dict[str, Any], ...] = ()
    mutated_by: tuple[str, ...] = ()  # rule ids whose mutation changed something
    judged: tuple[Judged, ...] = ()
    # What an admitted pod will hold until the watch sees it; None when nothing is to be held
    # (denied, no GPU, not a pod CREATE). Only a driver with reservations acts on it.
    hold: PodGpus | None = None
    unreadable: Unreadable | None = None
    mutated: Any = None  # the object after the patch, when the caller asked for both stages

    def __init__(
        self,
        patch: tuple[dict[str, Any], ...] = (),
        mutated_by: tuple[str, ...] = (),
        judged: tuple[Judged, ...] = (),
        hold: PodGpus | None = None,
        unreadable: Unreadable | None = None,
        mutated: Any = None,
    ) -> None:
        self.patch = patch
        self.mutated_by = mutated_by
        self.judged = judged
        self.hold = hold
        self.unreadable = unreadable
        self.mutated = mutated

    @property
    def allowed(self) -> bool:
        return self.unreadable is None and not any(j.mode is Mode.ENFORCE for j in self.judged)

    def _with(self, mode: Mode) -> tuple[Finding, ...]:
        return tuple(j.finding for j in self.judged if j.mode is mode)

    @property
    def denials(self) -> tuple[Finding, ...]:
        return self._with(Mode.ENFORCE)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return self._with(Mode.WARN)

    @property
    def audits(self) -> tuple[Finding, ...]:
        return self._with(Mode.AUDIT)

    @property
    def warned(self) -> bool:
        return any(j.mode is Mode.WARN for j in self.judged)

    def message(self) -> str:
        """The denial text: each denying finding with its fix, one per line, at most
        MAX_DENIALS of them and then how many more."""
        denials = self.denials
        lines = [f.message() for f in denials[:MAX_DENIALS]]
        if len(denials) > MAX_DENIALS:
            lines.append(
                f"gpu-admission: {len(denials) - MAX_DENIALS} more denials not shown "
                "(gpu-admission audit lists every one)"
            )
        return "\n".join(lines)

    def warning_lines(self) -> list[str]:
        """At most MAX_WARNINGS lines of at most WARNING_LIMIT characters each."""
        lines = [f.warning() for f in self.warnings]
        if len(lines) > MAX_WARNINGS:
            hidden = len(lines) - (MAX_WARNINGS - 1)
            lines = [*lines[: MAX_WARNINGS - 1], f"gpu-admission: {hidden} more warnings not shown"]
        return lines

    def annotations(self) -> dict[str, str]:
        """One audit annotation per rule that fired: rule id -> its strongest verdict."""
        out: dict[str, Verdict] = {}
        for j in self.judged:
            rule, verdict = j.finding.rule, j.verdict
            if rule not in out or _STRENGTH[verdict] < _STRENGTH[out[rule]]:
                out[rule] = verdict
        return {rule: str(v) for rule, v in out.items()}


def combine(
    findings: Iterable[tuple[Finding, Mode]],
    *,
    patch: Iterable[dict[str, Any]] = (),
    mutated_by: Iterable[str] = (),
    hold: PodGpus | None = None,
    mutated: Any = None,
) -> Decision:
    """One decision from the rules' findings (each with its rule's mode) and the patch.

    Advisory findings are demoted from enforce to warn; a denied object holds nothing.
    """
    judged = tuple(
        Judged(f, Mode.WARN if f.advisory and mode is Mode.ENFORCE else mode)
        for f, mode in findings
        if mode is not Mode.OFF
    )
    denied = any(j.mode is Mode.ENFORCE for j in judged)
    return Decision(
        patch=tuple(patch),
        mutated_by=tuple(mutated_by),
        judged=judged,
        hold=None if denied else hold,
        mutated=mutated,
    )


def unreadable(kind: str, path: str, problem: str) -> Decision:
    """The decision on an object the engine cannot read: refused, naming the field."""
    return Decision(unreadable=Unreadable(kind, path, problem))
