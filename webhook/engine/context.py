"""What a check may read besides the pod: the compiled rules in force, and the cluster facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from webhook.facts.model import Facts
from webhook.ruleset.models import RuleSettings

if TYPE_CHECKING:
    from webhook.engine.compiled import CompiledRules

__all__ = ["Context"]


# Not frozen (a frozen dataclass pays object.__setattr__ per field on every review); never
# edited after it is built all the same.
@dataclass(slots=True)
class Context:
    """Everything a check reads apart from the pod view. Immutable: checks do no I/O."""

    rules: CompiledRules  # the rules in force for the namespace (overrides applied)
    namespace: str
    kind: str
    operation: str = "CREATE"
    facts: Facts | None = None  # None: no cluster facts (offline audit)

    @property
    def settings(self) -> RuleSettings:
        """Each rule's settings, by rule id (`ctx.settings.gpu_shm.max_size`)."""
        return self.rules.settings
