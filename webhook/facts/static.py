"""Cluster facts frozen in memory: what a snapshot file (or a test) says, read per namespace.

Apart from the file's reader (`webhook.facts.snapshotfile`, whose validating models mypyc
cannot build) so that it is compiled: `facts_for` runs on every review judged against a
snapshot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from webhook.facts import dra
from webhook.facts.census import Census
from webhook.facts.model import (
    EMPTY_USAGE,
    TERMINATED,
    Facts,
    Node,
    NodeIndex,
    PodGpus,
    PriorityClass,
    Provisioned,
    Quota,
    Usage,
    visible_devices_keys,
)
from webhook.facts.provisioning import Provisioning, by_namespace
from webhook.facts.queues import QueueStore
from webhook.facts.servingruntimes import RuntimeStore
from webhook.facts.usages import NamespaceUsages
from webhook.facts.webhookconfigs import WebhookTimeouts

__all__ = ["StaticSnapshot"]


# Namespace -> name -> the keys `envFrom` could turn into NVIDIA_VISIBLE_DEVICES.
EnvSources = Mapping[str, Mapping[str, Mapping[str, str]]]
_NONE_HERE: Mapping[str, Mapping[str, str]] = MappingProxyType({})


def _env_sources(
    items: Iterable[tuple[str, str, Mapping[str, str]]] | None,
) -> dict[str, dict[str, dict[str, str]]] | None:
    """(namespace, name, data) -> the relevant keys by namespace and name; None stays None.

    An object with no relevant key is not kept: absent reads as "no such key", as it is.
    """
    if items is None:
        return None
    out: dict[str, dict[str, dict[str, str]]] = {}
    for namespace, name, data in items:
        keys = visible_devices_keys(data)
        if keys:
            out.setdefault(namespace, {})[name] = keys
        elif name in out.get(namespace, {}):  # a later entry of the same name replaces it
            del out[namespace][name]
    return out


class StaticSnapshot:
    """Cluster facts frozen in a file. Never stale: `age_seconds` is None."""

    def __init__(
        self,
        *,
        namespaces: Mapping[str, Mapping[str, str]],
        nodes: Iterable[Node],
        quotas: Iterable[Quota],
        priority_classes: Iterable[PriorityClass],
        pods: Iterable[PodGpus],
        config_maps: Iterable[tuple[str, str, Mapping[str, str]]] | None = None,
        secrets: Iterable[tuple[str, str, Mapping[str, str]]] | None = None,
        provisionable: Provisioning | Iterable[Node] | None = None,
        dra_cache: dra.DraCache | None = None,
        serving_runtimes: RuntimeStore | None = None,
        webhooks: WebhookTimeouts | None = None,
        census: Census | None = None,
        queues: QueueStore | None = None,
    ) -> None:
        """`config_maps` and `secrets` are (namespace, name, data) with data decoded; None
        means the kind is unknown, as for `provisionable` (shapes the cluster can create; given
        as bare shapes, they count as those of cluster-scoped objects)."""
        self._namespaces = {k: dict(v) for k, v in namespaces.items()}
        self._nodes = NodeIndex(nodes)
        grouped: dict[str, list[Quota]] = defaultdict(list)
        for q in quotas:
            grouped[q.namespace].append(q)
        self._quotas = {ns: tuple(qs) for ns, qs in grouped.items()}
        self._classes = {pc.name: pc for pc in priority_classes}
        self._usage: dict[str, Usage] = defaultdict(Usage)
        for pod in pods:
            if pod.phase not in TERMINATED:
                self._usage[pod.namespace].add(pod)
        self._usage = dict(self._usage)
        self._config_maps = _env_sources(config_maps)
        self._secrets = _env_sources(secrets)
        self._provisionable: Provisioned | None = None
        if isinstance(provisionable, Provisioning):
            self._provisionable = provisionable
        elif provisionable is not None:
            self._provisionable = by_namespace([("", tuple(provisionable))])
        self._dra = dra_cache  # DeviceClasses, claim templates, claims; None: unknown
        self._runtimes = serving_runtimes  # KServe's; None: unknown
        self._webhooks = webhooks  # validating webhook configurations; None: unknown
        self._queues = queues  # Kueue's and KAI's queues; None: unknown
        self.census = census  # who runs where (`rules check`); None: not known
        # What every namespace holds, for budgets over several namespaces.
        self._usages = NamespaceUsages(
            lambda: self._usage,
            lambda: self._namespaces,
            dra_cache.claim_devices if dra_cache is not None else lambda: {},
        )

    def node_index(self) -> NodeIndex:
        return self._nodes

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every namespace the snapshot lists, with its labels (`rules check` looks for
        overrides that cross in one of them)."""
        return {k: dict(v) for k, v in self._namespaces.items()}

    def served_names(self) -> frozenset[str]:
        return self._dra.served_names() if self._dra is not None else frozenset()

    def webhook_seconds(self) -> float | None:
        """The longest the validating webhooks on pods may take; None: unknown."""
        return self._webhooks.longest() if self._webhooks is not None else None

    def facts_for(self, namespace: str) -> Facts:
        runtimes = self._runtimes
        return Facts(
            namespace=namespace,
            namespace_labels=self._namespaces.get(namespace),
            quotas=self._quotas.get(namespace, ()),
            usage=self._usage.get(namespace, EMPTY_USAGE),
            priority_classes=self._classes,
            nodes=self._nodes,
            config_maps=_in(self._config_maps, namespace),
            secrets=_in(self._secrets, namespace),
            provisionable=self._provisionable,
            dra=None if self._dra is None else self._dra.facts_for(namespace),
            serving_runtimes=runtimes.facts_for(namespace) if runtimes is not None else None,
            usages=self._usages,
            queues=None if self._queues is None else self._queues.facts_for(namespace),
        )


def _in(sources: EnvSources | None, namespace: str) -> Mapping[str, Mapping[str, str]] | None:
    """One namespace's part: empty when it has none, None when the kind is unknown."""
    return None if sources is None else sources.get(namespace, _NONE_HERE)
