"""Each rule reads its own entry of a rule set's `rules:`: turning one rule's mode or mutation
off in a rule file changes that rule in the compiled rules, and no other."""

from __future__ import annotations

import pytest

from webhook.engine.checks import MUTATIONS, VALIDATIONS, Mutation, Validation
from webhook.engine.compiled import CompiledRules
from webhook.engine.decision import Mode
from webhook.ruleset.models import RuleSet


def _compiled(rules: dict[str, object]) -> CompiledRules:
    return CompiledRules(RuleSet.model_validate({"rules": rules}))


@pytest.mark.parametrize("validation", VALIDATIONS, ids=lambda v: v.rule)
def test_a_rules_mode_is_read_from_its_own_entry(validation: Validation) -> None:
    default = _compiled({}).modes
    changed = "warn" if default[validation.rule] is not Mode.WARN else "audit"
    modes = _compiled({validation.rule: {"mode": changed}}).modes
    assert modes[validation.rule] is Mode(changed)
    others = {rule: mode for rule, mode in modes.items() if rule != validation.rule}
    assert others == {rule: mode for rule, mode in default.items() if rule != validation.rule}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.rule)
def test_a_mutation_is_switched_by_its_own_entry(mutation: Mutation) -> None:
    on = {m.rule for m in _compiled({}).mutations}
    assert mutation.rule in on  # every mutation is on by default
    # gpu-requests-limits says `fix`, the others `mutate`.
    switch = "fix" if mutation.rule == "gpu-requests-limits" else "mutate"
    off = {m.rule for m in _compiled({mutation.rule: {switch: False}}).mutations}
    assert off == on - {mutation.rule}
