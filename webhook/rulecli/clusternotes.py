"""What `rules check --cluster-snapshot` says about a rule set and the cluster it meets: the
cluster objects the rules choose not to read, and built-in exempt namespaces that exist without
their component, so a platform team sees what they leave out and what a tenant may hold."""

from __future__ import annotations

from webhook.facts.census import Census
from webhook.facts.model import FactsSource
from webhook.facts.provisioning import Provisioning
from webhook.namepatterns import NamePatterns
from webhook.ruleset.components import unattended
from webhook.ruleset.models import RuleSet

__all__ = ["cluster_notes"]


def _provisioning(rs: RuleSet, source: FactsSource) -> list[str]:
    found = source.facts_for("default").provisionable
    if not isinstance(found, Provisioning):
        return []
    trusted = rs.cluster.provisioning_namespaces
    ignored = found.ignored(NamePatterns(trusted))
    if not ignored:
        return []
    return [
        f"Cluster API objects in {', '.join(ignored)} are not read: only those in "
        f"cluster.provisioningNamespaces ({', '.join(trusted) or 'none'}) say which GPU nodes "
        "the cluster can create; list a namespace there only if tenants cannot create objects "
        "in it"
    ]


def _components(rs: RuleSet, source: FactsSource) -> list[str]:
    """Built-in exempt namespaces that exist without their component (a tenant may have made
    them); said only when the facts show who runs where."""
    census = getattr(source, "census", None)
    if not isinstance(census, Census):
        return []
    return unattended(rs.exemptions.components, census.namespaces, census.pods)


def cluster_notes(rs: RuleSet, source: FactsSource) -> list[str]:
    """Warnings about what the rules leave out of this cluster's facts, and about built-in
    exemptions a tenant may hold."""
    return [*_provisioning(rs, source), *_components(rs, source)]
