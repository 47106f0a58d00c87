"""What a rule may know besides the pod: the rules in force, and read-only cluster facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from webhook.config import Rules, RuleSet

if TYPE_CHECKING:
    from webhook.cluster import ClusterFacts

__all__ = ["Context"]


@dataclass(frozen=True, slots=True)
class Context:
    """Everything a check reads apart from the pod view. Immutable: checks do no I/O."""

    ruleset: RuleSet  # already resolved for the namespace (overrides applied)
    namespace: str
    kind: str
    operation: str = "CREATE"
    cluster: ClusterFacts | None = None  # None: no cluster facts (offline audit)

    @property
    def rules(self) -> Rules:
        return self.ruleset.rules
