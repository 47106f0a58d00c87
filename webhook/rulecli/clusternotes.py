"""What `rules check --cluster-snapshot` says about a rule set and the cluster it meets: the
cluster objects the rules choose not to read, so a platform team sees what they leave out."""

from __future__ import annotations

from webhook.facts.model import FactsSource
from webhook.facts.provisioning import Provisioning
from webhook.namepatterns import NamePatterns
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


def cluster_notes(rs: RuleSet, source: FactsSource) -> list[str]:
    """Warnings about what the rules leave out of this cluster's facts."""
    return _provisioning(rs, source)
