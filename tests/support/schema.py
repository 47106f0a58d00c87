"""Kubernetes' OpenAPI schema as the judge of what the webhook and the commands write."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from tests.support.paths import K8S_VERSION


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every OpenAPI schema error of a built-in object (strict: unknown fields are errors)."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        # Where and which keyword, not the message: it quotes the instance, so the same
        # problem before and after a patch would read as two.
        where = ".".join(str(p) for p in exc.path)
        return [f"{where}: {exc.validator}"]
    return []


def pod_specs_as_pods(obj: dict[str, Any], table: Any = None) -> dict[str, dict[str, Any]]:
    """Each pod spec inside the object, wrapped as a Pod so the schema checks it as a PodSpec
    (`table`: a rule set's workload table, for kinds it declares)."""
    from webhook.engine.podviews import group_of, pod_views
    from webhook.engine.workloads import DEFAULT_TABLE
    from webhook.ruleset.models import RuleSet

    views = pod_views(
        obj,
        group=group_of(obj.get("apiVersion")),
        kind=obj["kind"],
        is_gpu=RuleSet().gpu_names().matches,
        table=table or DEFAULT_TABLE,
    )
    return {
        v.pointer: {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": v.spec}
        for v in views
    }


def schema_problems(obj: dict[str, Any], table: Any = None) -> list[str]:
    """Built-in kinds are checked whole; CRDs (no schema here) pod spec by pod spec."""
    from webhook.engine.podviews import BUILTIN_GROUPS, group_of

    if group_of(obj.get("apiVersion")) in BUILTIN_GROUPS:
        return schema_errors(obj)
    pods = pod_specs_as_pods(obj, table)
    return [f"{where}: {e}" for where, pod in pods.items() for e in schema_errors(pod)]


def assert_schema_valid(obj: dict[str, Any], table: Any = None) -> None:
    errors = schema_problems(obj, table)
    assert not errors, errors
