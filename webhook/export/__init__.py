"""`gpu-admission export`: the rules that need no cluster facts, as native admission policies.

The apiserver evaluates ValidatingAdmissionPolicies and (since Kubernetes 1.36, v1)
MutatingAdmissionPolicies in process: no network hop, nothing to go down. The policies are
generated from the rule set in force and the same workload table the engine reads, and the
messages are the engine's own (`messages`); what cannot be expressed faithfully is left to
the webhook with a reason.
"""

from webhook.export.bundle import build
from webhook.export.scope import Export, LeftOut

__all__ = ["Export", "LeftOut", "build"]
