"""Rule sets compiled at load: the settings in force are worked out once per namespace shape."""

from __future__ import annotations

from webhook.engine.compiled import compile_rules
from webhook.engine.decision import Mode
from webhook.ruleset.models import RuleSet


def ruleset(**doc: object) -> RuleSet:
    return RuleSet.model_validate(doc)


def test_namespaces_under_the_same_overrides_share_one_compiled_rule_set() -> None:
    rules = compile_rules(
        ruleset(
            overrides=[
                {
                    "name": "research",
                    "namespaces": ["research-*"],
                    "rules": {"gpu-shm": {"maxSize": "32Gi"}},
                }
            ]
        )
    )
    shared = {id(rules.for_namespace(f"research-{i}", None)) for i in range(12)}
    assert len(shared) == 1
    assert rules.for_namespace("research-3", None).settings.gpu_shm.max_size == "32Gi"
    assert rules.for_namespace("ml-team", None) is rules.base
    assert rules.base.settings.gpu_shm.max_size == "16Gi"


def test_a_selector_override_applies_only_when_the_labels_are_known() -> None:
    rules = compile_rules(
        ruleset(
            overrides=[
                {
                    "name": "batch",
                    "namespaceSelector": {"matchLabels": {"tier": "batch"}},
                    "rules": {"gpu-memory-limit": {"mode": "off"}},
                }
            ]
        )
    )
    assert rules.for_namespace("a", {"tier": "batch"}).mode("gpu-memory-limit") is Mode.OFF
    assert rules.for_namespace("a", None).mode("gpu-memory-limit") is Mode.WARN
    assert rules.for_namespace("b", {"tier": "web"}).mode("gpu-memory-limit") is Mode.WARN


def test_shadow_mode_switches_every_mutation_off_and_caps_every_validation() -> None:
    rules = compile_rules(ruleset(mode="audit")).base
    assert rules.mutations == ()
    assert {mode for _, mode in rules.validations} == {Mode.AUDIT}


def test_a_rule_switched_off_is_not_listed_among_the_checks_that_run() -> None:
    rules = compile_rules(ruleset(rules={"gpu-quota": {"mode": "off"}})).base
    assert "gpu-quota" not in rules.active_rules
    assert rules.cluster_rules == ("gpu-priority-class", "gpu-schedulable")


def test_gpu_resource_names_and_patterns_are_recognised() -> None:
    rules = compile_rules(RuleSet()).base
    assert rules.is_gpu("nvidia.com/gpu") and rules.is_gpu("nvidia.com/mig-1g.10gb")
    assert rules.is_gpu("gpu.intel.com/i915") and rules.is_gpu("nvidia.com/gpu.shared")
    assert not rules.is_gpu("cpu") and not rules.is_gpu("example.com/fpga")
