"""Probes on GPU containers: give model loading time before readiness and liveness kick in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhook.engine.checks.resources import gpu_containers
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import ContainerView, PodView
from webhook.ruleset.models import ProbesRule

__all__ = ["adjust_probes", "readiness_probe", "serves"]

_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


def _raise_delays(container: dict[str, Any], cfg: ProbesRule) -> bool:
    changed = False
    for probe_name, floor in (
        ("readinessProbe", cfg.readiness_min_delay_seconds),
        ("livenessProbe", cfg.liveness_min_delay_seconds),
    ):
        probe = container.get(probe_name)
        if not probe:
            continue
        current = probe.get("initialDelaySeconds")
        if not isinstance(current, int) or isinstance(current, bool) or current < floor:
            container[probe_name] = {**probe, "initialDelaySeconds": floor}
            changed = True
    return changed


def _add_startup_probe(container: dict[str, Any], cfg: ProbesRule) -> bool:
    """Kubernetes' own answer to slow starts: a startupProbe holds the others off until it passes.

    It reuses the handler of the liveness probe (or readiness probe), so it checks the same
    endpoint, and allows `startup_budget_seconds` before the kubelet gives up.
    """
    source = container.get("livenessProbe") or container.get("readinessProbe")
    if not source:
        return False
    handler = {k: source[k] for k in _HANDLERS if k in source}
    if not handler:
        return False
    period = cfg.startup_period_seconds
    container["startupProbe"] = {
        **handler,
        "periodSeconds": period,
        "failureThreshold": max(1, -(-cfg.startup_budget_seconds // period)),
        "successThreshold": 1,
    }
    return True


def adjust_probes(spec: dict[str, Any], pod: PodView, ctx: Context) -> bool:
    """A container that already has a startupProbe is left alone: it holds the others off."""
    cfg = ctx.settings.gpu_probe_delays
    changed = False
    for c in gpu_containers(pod):
        container = c.locate(spec)
        if container.get("startupProbe"):
            continue
        if cfg.strategy == "startup-probe":
            changed |= _add_startup_probe(container, cfg)
        else:
            changed |= _raise_delays(container, cfg)
    return changed


def serves(c: ContainerView, pod: PodView) -> bool:
    """Whether the container takes traffic: it declares ports, or it is the model server of a
    serving kind's template (its first container, `serving: main`). A container that
    declares none (a worker joining a leader, a `sleep infinity` pod) takes none."""
    if not pod.serving:
        return False
    ports = c.raw.get("ports")
    if isinstance(ports, list) and ports:
        return True
    return pod.serving == "main" and c.slot == ("containers", 0)


def readiness_probe(pod: PodView, ctx: Context) -> Iterator[Finding]:
    """Serving containers only: of a kind that `serves` (never a batch or training kind, nor
    a LeaderWorkerSet's worker template or worker pod: `PodView.serving`), not of a batch pod
    (restartPolicy Never/OnFailure), and taking traffic (`serves`)."""
    if not pod.serving or pod.spec.get("restartPolicy") in ("Never", "OnFailure"):
        return
    for c in gpu_containers(pod):
        if not c.raw.get("readinessProbe") and serves(c, pod):
            yield Finding(
                rule="gpu-readiness-probe",
                summary=(
                    f"gpu-readiness-probe: {c.label()} asks for a GPU but has no readinessProbe"
                ),
                fix=(
                    f"add {c.field_path}.readinessProbe (e.g. httpGet on the model server's "
                    "health endpoint) so traffic waits until the model is loaded"
                ),
                field=f"{c.field_path}.readinessProbe",
            )
