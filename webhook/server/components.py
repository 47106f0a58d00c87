"""At start-up, name the built-in exempt namespaces that exist without their component.

Where tenants may create namespaces, a tenant can make one of the built-in names; its pods
under the component's account names then skip the GPU-access rules. Once the live cache has
listed the namespaces, the pods of each built-in namespace that exists are listed once (the
webhook may list pods already) and compared with the component's accounts and DaemonSets
(`webhook.ruleset.components.unattended`); each mismatch is a warning in the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from webhook.facts.census import Census
from webhook.facts.live import LiveCache
from webhook.facts.watched import pages
from webhook.ruleset.components import unattended
from webhook.server.reload import RuleHolder

__all__ = ["census_of", "unattended_namespaces"]

log = logging.getLogger("gpu-admission")


def census_of(live: LiveCache, namespaces: list[str]) -> Census:
    """Which of `namespaces` exist (from the cache) and who runs in them (one list each)."""
    from kubernetes import client

    existing = [n for n in namespaces if live.facts_for(n).namespace_labels is not None]
    api = client.CoreV1Api(live.api_client)
    pods = []
    for namespace in existing:
        for items, _ in pages(api.list_namespaced_pod, live.page_size, namespace=namespace):
            for pod in items:
                spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
                pods.append(
                    (namespace, str(spec.get("serviceAccountName") or ""), str(meta.get("name")))
                )
    return Census.of(existing, pods)


def unattended_namespaces(
    holder: RuleHolder, live: LiveCache, wait_seconds: float = 300.0
) -> Callable[[], Coroutine[Any, Any, None]]:
    """The start-up check as a task: waits for the cache's first sync, then warns once."""

    async def check() -> None:
        running = asyncio.get_running_loop()
        waited = 0.0
        while not live.synced or holder.current is None:
            if waited >= wait_seconds:
                return
            await asyncio.sleep(1.0)
            waited += 1.0
        components = holder.current.source.exemptions.components
        names = [n for c in components for n in c.namespaces]
        try:
            census = await running.run_in_executor(None, census_of, live, names)
        except Exception as exc:  # a warning we cannot give is not worth a failure
            log.warning("built-in exemptions: could not list their namespaces' pods (%s)", exc)
            return
        for line in unattended(components, census.namespaces, census.pods):
            log.warning(line)

    return check
