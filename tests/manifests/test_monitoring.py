"""The monitoring users install (manifests/monitoring): the alerts and the dashboard query
metrics the server really exports, in PromQL that parses, in objects of the right shape.

No Prometheus runs here, so the PrometheusRule is checked for the structure the Prometheus
Operator's CRD requires, every expression is parsed with promql-parser (the Rust port of
Prometheus' parser), and every metric name it selects is one the server's registry holds,
or one of the few named external series (Prometheus' `up`, kube-state-metrics).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import REGISTRY

from tests.support.manifests import require_kubectl
from tests.support.paths import ROOT

MONITORING = ROOT / "manifests" / "monitoring"

# Series the alerts read from elsewhere: Prometheus' own scrape health and kube-state-metrics.
EXTERNAL = {
    "up",
    "kube_deployment_spec_replicas",
    "kube_deployment_status_replicas_available",
}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
SEVERITIES = {"critical", "warning", "info"}


def _server_metric_names() -> set[str]:
    """Every sample name the running server exposes on /metrics (families it registers at
    import and at start-up, the holds' collector included)."""
    from prometheus_client import CollectorRegistry

    import webhook.server.app as app
    from webhook.facts.reservations import Reservations

    holds = CollectorRegistry()
    holds.register(app._HoldMetrics(Reservations()))
    names: set[str] = set()
    for registry in (REGISTRY, holds):
        for family in registry.collect():
            suffixes = {
                "counter": ("_total",),
                "histogram": ("_bucket", "_count", "_sum"),
                "gauge": ("",),
            }.get(family.type, ("",))
            names.update(family.name + suffix for suffix in suffixes)
    return {n for n in names if n.startswith("gpu_admission_")}


def _selected_metrics(expr: str) -> set[str]:
    """The metric names an expression selects, walking promql-parser's tree."""
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.add(node.name)  # type: ignore[arg-type]
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attr, None)
            if child is not None and isinstance(child, promql_parser.Expr):
                visit(child)
        for child in getattr(node, "args", None) or []:
            visit(child)

    visit(promql_parser.parse(expr))
    return found


def _rule() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return doc


def _alert_exprs() -> dict[str, str]:
    return {r["alert"]: r["expr"] for g in _rule()["spec"]["groups"] for r in g["rules"]}


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((MONITORING / "dashboard.json").read_text())
    return doc


def _dashboard_exprs() -> dict[str, str]:
    return {
        f"{p['title']} {t['refId']}": t["expr"]
        for p in _dashboard()["panels"]
        for t in p["targets"]
    }


def test_the_selector_walk_finds_every_metric_of_an_expression() -> None:
    expr = 'sum(rate(a_total{x="1"}[5m])) / on() group_left max(b) > bool scalar(c) or absent(d)'
    assert _selected_metrics(expr) == {"a_total", "b", "c", "d"}


def test_the_server_registry_holds_what_operating_it_documents() -> None:
    names = _server_metric_names()
    documented = (ROOT / "docs" / "operating.md").read_text()
    for name in names - {
        "gpu_admission_request_seconds_count",
        "gpu_admission_request_seconds_sum",
    }:
        base = name.removesuffix("_bucket")
        assert f"`{base}" in documented, f"{base} is exported but not in docs/operating.md"


def test_the_prometheus_rule_has_the_shape_the_operator_requires() -> None:
    doc = _rule()
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["namespace"] == "gpu-admission"
    groups = doc["spec"]["groups"]
    assert groups and len({g["name"] for g in groups}) == len(groups)
    alerts = []
    for group in groups:
        assert set(group) <= {"name", "interval", "rules", "limit"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations"}
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
            if "for" in rule:
                assert DURATION.match(rule["for"]), rule["for"]
            assert rule["labels"]["severity"] in SEVERITIES
            assert {"summary", "description"} <= set(rule["annotations"])
            assert all(isinstance(v, str) for v in rule["annotations"].values())
            alerts.append(rule["alert"])
    assert len(set(alerts)) == len(alerts)


def test_the_alerts_cover_what_an_operator_must_hear_about() -> None:
    exprs = _alert_exprs()
    used = {name: _selected_metrics(expr) for name, expr in exprs.items()}
    every = set().union(*used.values())
    assert "up" in every  # down
    assert "kube_deployment_status_replicas_available" in every  # unready
    assert any("error" in exprs[a] and "gpu_admission_requests_total" in used[a] for a in exprs)
    assert "gpu_admission_request_seconds_bucket" in every  # p99 over the budget
    assert "gpu_admission_serving_cert_expiry_timestamp_seconds" in every  # cert expiry
    assert any('result="refused"' in exprs[a] for a in exprs)  # reload refused
    assert "gpu_admission_gpu_holds_unmatched_total" in every  # forged or refused reviews
    cert = next(e for e in exprs.values() if "cert_expiry" in e)
    assert "14 * 86400" in cert


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_expression_parses_and_selects_only_exported_metrics(source: str) -> None:
    exprs = _alert_exprs() if source == "alerts" else _dashboard_exprs()
    exported = _server_metric_names()
    assert exprs
    for name, expr in exprs.items():
        for metric in _selected_metrics(expr):
            assert metric in exported or metric in EXTERNAL, f"{name}: {metric} is not exported"


def test_a_broken_expression_is_refused_by_the_parser() -> None:
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(gpu_admission_requests_total[5m])")


def test_the_dashboard_is_a_grafana_dashboard_on_a_prometheus_variable() -> None:
    dash = _dashboard()
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(set(ids)) == len(ids)
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["targets"], panel["title"]


def test_the_monitoring_kustomization_lists_its_files() -> None:
    kust = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    for name in kust["resources"]:
        assert (MONITORING / name).is_file()
    files = kust["configMapGenerator"][0]["files"]
    assert files == ["gpu-admission-dashboard.json=dashboard.json"]


def test_the_cert_expiry_gauge_reads_the_serving_certificate(tmp_path: Path) -> None:
    from webhook.certs.generate import generate
    from webhook.server.certexpiry import cert_expiry_seconds, watch_serving_cert

    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    paths = generate(tmp_path, ["localhost"], now=now)
    expiry = cert_expiry_seconds(paths.cert)
    assert now.timestamp() + 300 * 86400 < expiry < now.timestamp() + 400 * 86400
    watch_serving_cert(paths.cert)
    assert REGISTRY.get_sample_value("gpu_admission_serving_cert_expiry_timestamp_seconds") == (
        expiry
    )
    stamp = paths.cert.stat().st_mtime
    paths.cert.write_text("not a certificate")
    os.utime(paths.cert, (stamp + 10, stamp + 10))  # a rewrite the gauge must notice
    value = REGISTRY.get_sample_value("gpu_admission_serving_cert_expiry_timestamp_seconds")
    assert value is not None and math.isnan(value)
    assert math.isnan(cert_expiry_seconds(paths.cert))
    assert math.isnan(cert_expiry_seconds(tmp_path / "missing.crt"))


def test_kubectl_renders_the_monitoring_kustomization_into_valid_objects() -> None:
    import kubernetes_validate

    kubectl = require_kubectl("the monitoring kustomization's rendering")
    out = subprocess.run(
        [kubectl, "kustomize", str(MONITORING)], capture_output=True, text=True, check=True
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "PodMonitor", "PrometheusRule"]
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    kubernetes_validate.validate(config, kubernetes_validate.latest_version(), strict=True)
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config["data"]["gpu-admission-dashboard.json"]) == _dashboard()
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    deployment = yaml.safe_load((ROOT / "manifests" / "base" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in ports
    labels = monitor["spec"]["selector"]["matchLabels"]
    assert labels.items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "gpu-admission"
