"""What a check may read besides the pod: the compiled rules in force, and the cluster facts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from webhook.facts.model import Facts
from webhook.ruleset.models import RuleSettings

if TYPE_CHECKING:
    from webhook.engine.compiled import CompiledRules
    from webhook.engine.totals import Totals

__all__ = ["Context"]


class Context:
    """Everything a check reads apart from the pod view. Immutable: checks do no I/O.

    A plain class, not a dataclass: compiled by mypyc, a dataclass would resolve its
    annotations at import, and `CompiledRules` imports the checks that import this.
    """

    __slots__ = ("facts", "kind", "namespace", "operation", "rules", "totals")

    def __init__(
        self,
        rules: CompiledRules,
        namespace: str,
        kind: str,
        operation: str = "CREATE",
        facts: Facts | None = None,
    ) -> None:
        self.rules = rules  # the rules in force for the namespace (overrides applied)
        self.namespace = namespace
        self.kind = kind
        self.operation = operation
        self.facts = facts  # None: no cluster facts (offline audit)
        # A controller's GPU asks, all its pods at once (set before validation); None for a
        # pod, or a controller asking no GPU.
        self.totals: Totals | None = None

    @property
    def settings(self) -> RuleSettings:
        """Each rule's settings, by rule id (`ctx.settings.gpu_shm.max_size`)."""
        return self.rules.settings
