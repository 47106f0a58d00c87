"""Cluster facts frozen in memory: what a snapshot file (or a test) says, read per namespace.

Apart from the file's reader (`webhook.facts.snapshotfile`, whose validating models mypyc
cannot build) so that it is compiled: `facts_for` runs on every review judged against a
snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook.facts import dra
from webhook.facts.census import Census
from webhook.facts.devicekeys import visible_devices_keys
from webhook.facts.model import (
    Facts,
    Node,
    NodeIndex,
    PodGpus,
    PriorityClass,
    Quota,
)
from webhook.facts.provisioning import Provisioning, by_namespace
from webhook.facts.queues import QueueStore
from webhook.facts.servingruntimes import RuntimeStore
from webhook.facts.stores import Item, ProvisioningStore, Stores
from webhook.facts.webhookconfigs import WebhookTimeouts

__all__ = ["StaticSnapshot"]


def _env_sources(items: Iterable[tuple[str, str, Mapping[str, str]]]) -> list[Item]:
    """(namespace, name, data) -> the same with only the keys `envFrom` could turn into
    NVIDIA_VISIBLE_DEVICES (`ConfigMapStore` keeps those)."""
    return [(namespace, name, visible_devices_keys(data)) for namespace, name, data in items]


class StaticSnapshot:
    """Cluster facts frozen in a file. Never stale: `age_seconds` is None.

    Held in the stores the live cache keeps (`webhook.facts.stores`), each filled once."""

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
        as bare shapes, they count as those of cluster-scoped objects). The DRA, KServe,
        webhook and queue stores are None when the snapshot knows nothing of them."""
        provisioned: Provisioning | None = None
        if isinstance(provisionable, Provisioning):
            provisioned = provisionable
        elif provisionable is not None:
            provisioned = by_namespace([("", tuple(provisionable))])
        stores = Stores(
            provisioning=ProvisioningStore.of(provisioned),
            dra=dra_cache,
            runtimes=serving_runtimes,
            webhooks=webhooks,
            queues=queues,
        )
        stores.namespaces.replace("namespaces", [("", k, dict(v)) for k, v in namespaces.items()])
        stores.nodes.replace("nodes", [("", n.name, n) for n in nodes])
        stores.quotas.replace("resourcequotas", [(q.namespace, q.name, q) for q in quotas])
        stores.classes.replace("priorityclasses", [("", c.name, c) for c in priority_classes])
        stores.pods.replace("pods", [(p.namespace, p.name, p) for p in pods])
        if config_maps is not None:
            stores.config_maps.replace("configmaps", _env_sources(config_maps))
        if secrets is not None:
            stores.secrets.replace("secrets", _env_sources(secrets))
        self._stores = stores
        self.census = census  # who runs where (`rules check`); None: not known

    def node_index(self) -> NodeIndex:
        return self._stores.nodes.facts_for("")

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every namespace the snapshot lists, with its labels (`rules check` looks for
        overrides that cross in one of them)."""
        return {k: dict(v) for k, v in self._stores.namespaces.table().items()}

    def served_names(self) -> frozenset[str]:
        return self._stores.served_names()

    def webhook_seconds(self) -> float | None:
        """The longest the validating webhooks on pods may take; None: unknown."""
        return self._stores.webhook_seconds()

    def facts_for(self, namespace: str) -> Facts:
        return self._stores.facts_for(namespace, None)
