"""What a check reports: one finding per problem, relative to the pod spec it looked at."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WARNING_LIMIT", "Finding"]

# The apiserver cuts a warning past 256 characters; kubectl users read ~120 on one line.
WARNING_LIMIT = 120


# A compiled value: never edited once built ("Compiled values", docs/development.md), and
# hashable like a frozen one. A denial storm builds findings by the thousand.
@dataclass(slots=True, init=False, unsafe_hash=True)
class Finding:
    """A rule's complaint about one field.

    `summary` starts with the rule id and names the container, the field, the value found and the
    value expected; it must fit a warning line. `fix` says what to change, for the denial message.
    """

    rule: str
    summary: str
    fix: str
    field: str  # kubectl-style path of the offending field, e.g. spec.containers[0].env[2]
    # Advisory findings never deny: the rule could not judge (no cluster facts) and its
    # whenUnknown is "allow", or the object is a controller whose pods are judged later.
    advisory: bool = False

    def __init__(
        self, rule: str, summary: str, fix: str, field: str, advisory: bool = False
    ) -> None:
        self.rule = rule
        self.summary = summary
        self.fix = fix
        self.field = field
        self.advisory = advisory

    def message(self) -> str:
        """The full text a denial carries."""
        return f"{self.summary}. Fix: {self.fix}"

    def warning(self) -> str:
        """One warning line: the full message if it fits, else the summary, cut at the limit."""
        full = self.message()
        if len(full) <= WARNING_LIMIT:
            return full
        if len(self.summary) <= WARNING_LIMIT:
            return self.summary
        return self.summary[: WARNING_LIMIT - 1] + "…"
