"""A rule set made ready to serve: resolved per namespace shape once, patterns compiled.

Loading a rule set (at start-up or on a hot reload) compiles it: exemptions and override
namespace tests become compiled matchers, and the settings in force for each *shape* (the set
of overrides that apply to a namespace) are merged once, with their enabled mutations, active
validations and compiled patterns listed. A request then costs a dictionary lookup, however
many namespaces share a shape. Compiled objects are never edited after they are built, apart
from their bounded lookup tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from webhook.engine.checks import (
    MUTATIONS,
    VALIDATIONS,
    Mutation,
    Validation,
    placement,
    quota,
    schedulable,
    shm,
)
from webhook.engine.decision import Mode
from webhook.engine.prefilter import gated, markers, might_apply
from webhook.engine.sharing import SharingSchedulers
from webhook.engine.workloads import workload_table
from webhook.facts.dra import IMPLICIT_PREFIX
from webhook.namepatterns import NamePatterns
from webhook.ruleset.models import QuotaBudget, RuleSet, RuleSettings
from webhook.ruleset.resolve import applicable, matchers, merge

__all__ = ["CompiledRuleSet", "CompiledRules", "compile_rules"]

# Lookup tables are bounded against made-up namespace, label and resource names.
_TABLE_LIMIT = 4096


class CompiledRules:
    """The rules in force for one namespace shape: settings, checks to run, compiled patterns."""

    def __init__(self, ruleset: RuleSet) -> None:
        self.ruleset = ruleset  # overrides already merged in
        self.settings: RuleSettings = ruleset.rules
        ceiling = Mode(ruleset.mode)
        self.ceiling = ceiling
        # Shadow mode (`audit`) and `off` change nothing, mutations included.
        mutating = ceiling in (Mode.ENFORCE, Mode.WARN)
        self.mutations: tuple[Mutation, ...] = tuple(
            m for m in MUTATIONS if mutating and m.enabled(self.settings)
        )
        spend = self.settings.gpu_spend
        # gpu-spend's patch of a job's own fields (`spend.object_patch`): not a pod spec's.
        self.spend_patch = (
            mutating
            and spend.mutate
            and spend.mode != "off"
            and (
                spend.ttl_seconds_after_finished is not None
                or spend.active_deadline_seconds is not None
            )
        )
        modes = {v.rule: Mode(v.settings(self.settings).mode).under(ceiling) for v in VALIDATIONS}
        self.modes: Mapping[str, Mode] = modes
        active = tuple((v, modes[v.rule]) for v in VALIDATIONS if modes[v.rule] is not Mode.OFF)
        self.validations: tuple[tuple[Validation, Mode], ...] = active
        # gpu-queue judges and labels the object itself (not a pod spec), when it is on.
        self.queue_active = modes["gpu-queue"] is not Mode.OFF
        self.queue_mutation = mutating and self.settings.gpu_queue.mutate and self.queue_active
        self.offline_validations = tuple(
            (v, m) for v, m in active if not v.needs_cluster or v.offline_part
        )
        # For reports: rules that judge every object, and those among them needing facts.
        self.active_rules = tuple(v.rule for v, _ in active)
        self.cluster_rules = tuple(v.rule for v, _ in active if v.needs_cluster)
        self._gpu = ruleset.gpu_names()
        self._gpu_seen: dict[str, bool] = {}
        # Each check module makes its own settings ready (`prepare`); kept here per shape.
        self.tolerations, self.class_tolerations, self.taint_keys = placement.prepare(self.settings)
        self.shm_sizes = shm.prepare(self.settings)
        self.budgets = quota.prepare(self.settings)
        # The rules in force in another namespace (`CompiledRuleSet.for_namespace`); None while
        # the rule set has no overrides, when every namespace has these same budgets.
        self.rules_for: Callable[[str, Mapping[str, str] | None], CompiledRules] | None = None
        (
            self.gpu_label_prefixes,
            self.provisionable,
            self.provisioning_known,
            self.cluster_autoscalers,
        ) = schedulable.prepare(self.settings)
        # DRA: which DeviceClasses hand out GPUs; `engine.claims` reads them.
        classes = ruleset.gpu_device_classes
        self.gpu_class_names = NamePatterns(classes.names)
        self.gpu_drivers = NamePatterns(classes.drivers)
        self.max_staleness_seconds = ruleset.cluster.max_staleness_seconds
        # Where the autoscalers' objects are read from (`schedulable.cluster_shapes`).
        self.provisioning_namespaces = NamePatterns(ruleset.cluster.provisioning_namespaces)

    def is_gpu(self, name: str) -> bool:
        """Whether a resource name counts as a GPU; remembered per name (a cluster uses a
        handful of resource names on every request)."""
        known = self._gpu_seen.get(name)
        if known is None:
            if len(self._gpu_seen) >= _TABLE_LIMIT:
                self._gpu_seen.clear()
            known = self._gpu_seen[name] = self._gpu.matches(name) or self._gpu_class_name(name)
        return known

    def _gpu_class_name(self, name: str) -> bool:
        """`deviceclass.resource.kubernetes.io/<class>` (Kubernetes 1.34+: devices of a DRA
        class asked as a plain resource) of a class the rules call a GPU class by its name, or
        named after a GPU driver; classes known so only from the facts are `engine.claims`'."""
        if not name.startswith(IMPLICIT_PREFIX):
            return False
        device_class = name[len(IMPLICIT_PREFIX) :]
        return self.gpu_class_names.matches(device_class) or self.gpu_drivers.matches(device_class)

    def mode(self, rule: str) -> Mode:
        """A validation's mode under the global ceiling (OFF for unknown ids)."""
        return self.modes.get(rule, Mode.OFF)

    def budget_in(
        self, budget: QuotaBudget, namespace: str, labels: Mapping[str, str] | None
    ) -> bool:
        """Whether `budget` is in force in `namespace` too: a budget an override sets is in
        force only where the override applies (its own namespaces and selector are the
        caller's to test)."""
        rules_for = self.rules_for
        if rules_for is None:
            return True
        there = rules_for(namespace, labels)
        return there is self or any(b == budget for b, _ in there.budgets)


class CompiledRuleSet:
    """A whole loaded rule set: exemptions, and the compiled rules for each namespace shape."""

    def __init__(self, ruleset: RuleSet) -> None:
        self.source = ruleset
        ex = ruleset.exemptions
        self.exempt_namespaces = NamePatterns(ex.all_namespaces)
        self.exempt_namespace_selector = ex.namespace_selector
        self.exempt_pods = ex.pod_selector
        self.exempt_accounts = NamePatterns(ex.service_accounts) if ex.service_accounts else None
        # Partial exemptions (`engine.exempt`), as "namespace/name": the built-in components'
        # own accounts and DaemonSets, and the DaemonSets the rule set names.
        comps = ex.components
        accounts = [f"{n}/{a}" for c in comps for n in c.namespaces for a in c.accounts]
        daemonsets = [f"{n}/{d}" for c in comps for n in c.namespaces for d in c.daemonsets]
        daemonsets += [f"{w.namespace}/{w.name}" for w in ex.workloads]
        self.component_accounts = NamePatterns(accounts) if accounts else None
        self.exempt_daemonsets = NamePatterns(daemonsets) if daemonsets else None
        self._matchers = matchers(ruleset)
        self.base = CompiledRules(merge(ruleset, ()).rules if ruleset.overrides else ruleset)
        if self._matchers:
            self.base.rules_for = self.for_namespace
        self._by_shape: dict[tuple[int, ...], CompiledRules] = {(): self.base}
        self._shape_of: dict[tuple[str, tuple[tuple[str, str], ...] | None], tuple[int, ...]] = {}
        self.markers = markers(ruleset)
        self._gated = gated(self.markers)
        # Where each kind keeps its pod specs: shipped kinds and the rule set's own.
        self.workloads = workload_table(ruleset.workloads)
        self.sharing = SharingSchedulers(ruleset.gpu_sharing)
        # The GPU taint keys of the rule set and its overrides, as the fast path knows them.
        self.taint_keys = frozenset(t.key for t in ruleset.rules.gpu_tolerations.tolerations) | {
            t["key"]
            for o in ruleset.overrides
            for t in o.rules.get("gpu-tolerations", {}).get("tolerations", [])
            if isinstance(t, dict) and isinstance(t.get("key"), str)
        }

    def might_apply(self, raw: bytes) -> bool:
        """False when the raw object bytes show that no rule can apply (the fast path)."""
        return might_apply(raw, self._gated)

    def exempt_namespace(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        if self.exempt_namespaces.matches(namespace):
            return True
        selector = self.exempt_namespace_selector
        return selector is not None and labels is not None and selector.matches(labels)

    def exempt_account(self, namespace: str, account: str) -> bool:
        return self.exempt_accounts is not None and self.exempt_accounts.matches(
            f"{namespace}/{account}"
        )

    def for_namespace(self, namespace: str, labels: Mapping[str, str] | None) -> CompiledRules:
        """The compiled rules in force in `namespace` with these labels (None: unknown)."""
        if not self._matchers:
            return self.base
        key = (namespace, tuple(sorted(labels.items())) if labels is not None else None)
        shape = self._shape_of.get(key)
        if shape is None:
            if len(self._shape_of) >= _TABLE_LIMIT:
                self._shape_of.clear()
            shape = self._shape_of[key] = applicable(self.source, self._matchers, namespace, labels)
        rules = self._by_shape.get(shape)
        if rules is None:
            if len(self._by_shape) >= _TABLE_LIMIT:
                self._by_shape = {(): self.base}
            rules = self._by_shape[shape] = CompiledRules(merge(self.source, shape).rules)
            rules.rules_for = self.for_namespace
        return rules


def compile_rules(ruleset: RuleSet) -> CompiledRuleSet:
    return CompiledRuleSet(ruleset)
