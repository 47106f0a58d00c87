"""How long the admission chain may keep a pod create from being stored after we answer.

The apiserver calls every validating webhook that applies to a request at once and stores the
object only when all have answered or timed out (`timeoutSeconds`, 10 by default, at most 30).
A GPU hold taken when this webhook admits a pod must outlast that wait, or a burst that
arrives while a slow webhook beside ours still holds the first creates finds their GPUs free
again. So the hold settle time follows the longest `timeoutSeconds` among the cluster's
ValidatingWebhookConfigurations whose rules can match a pod CREATE, plus `SETTLE_MARGIN` for
the write and the watch's delivery (`Reservations`).

Which webhooks apply is judged from their rules alone (operations, API group, resource,
scope): a namespace or object selector or a match condition may spare some pods, but the
wait is bounded by the webhooks that could apply. A configuration in a shape no API server
stores counts as the longest wait there is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "KIND",
    "MAX_TIMEOUT",
    "SETTLE_MARGIN",
    "WebhookTimeouts",
    "pod_timeout",
]

log = logging.getLogger("gpu-admission.cache")

KIND = "validatingwebhookconfigurations"  # admissionregistration.k8s.io/v1
DEFAULT_TIMEOUT = 10
MAX_TIMEOUT = 30  # the API refuses a longer timeoutSeconds
# Seconds beyond the slowest webhook for the write to etcd and the watch to deliver the pod.
SETTLE_MARGIN = 2.0


def _has(values: Any, *accepted: str) -> bool:
    return isinstance(values, list) and any(v in accepted for v in values)


def _applies_to_pod_creates(rule: Any) -> bool:
    """Whether one rule of a webhook matches `CREATE` of core `v1` pods (`pods/*` names
    subresources only; `*` every resource, `*/*` every resource and subresource)."""
    if not isinstance(rule, dict):
        return True
    scope = rule.get("scope", "*")
    return (
        _has(rule.get("operations"), "CREATE", "*")
        and _has(rule.get("apiGroups"), "", "*")
        and _has(rule.get("resources"), "pods", "*", "*/*")
        and scope in ("*", "Namespaced", None)
    )


def _timeout(webhook: Mapping[str, Any]) -> int:
    seconds = webhook.get("timeoutSeconds", DEFAULT_TIMEOUT)
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        return MAX_TIMEOUT
    return max(1, min(seconds, MAX_TIMEOUT))


def pod_timeout(obj: Mapping[str, Any]) -> int | None:
    """The longest `timeoutSeconds` of a configuration's webhooks that apply to pod creates;
    None when none does."""
    webhooks = obj.get("webhooks")
    if webhooks is None:
        return None
    if not isinstance(webhooks, list):
        return MAX_TIMEOUT
    longest: int | None = None
    for hook in webhooks:
        if not isinstance(hook, dict):
            return MAX_TIMEOUT
        rules = hook.get("rules")
        if not isinstance(rules, list):
            return MAX_TIMEOUT
        if any(_applies_to_pod_creates(r) for r in rules):
            longest = max(longest or 0, _timeout(hook))
    return longest


class WebhookTimeouts:
    """Each configuration's wait on pod creates, by name, for the live cache and a snapshot.

    Unknown (None from `longest`) until listed, and again after a 403; a list replaces all
    of it, a watch event one name. Not locked itself: the live cache writes under its lock,
    and a reader takes one number.
    """

    __slots__ = ("_known", "_longest", "_waits")

    def __init__(self) -> None:
        self._waits: dict[str, int] = {}
        self._known = False
        self._longest: float | None = None

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> WebhookTimeouts:
        store = cls()
        store.replace(KIND, (reduce(o) for o in objects))
        return store

    def longest(self) -> float | None:
        """Seconds the slowest validating webhook on pods may take; 0 when none applies to
        pods; None when the configurations are not known."""
        return self._longest

    def facts_for(self, namespace: str) -> float | None:
        """The same for every namespace (`longest`)."""
        return self._longest

    def replace(self, kind: str, items: Iterable[tuple[str, str, int | None]]) -> None:
        """A whole list (`reduce`d): what was there before is gone."""
        self._waits = {name: wait for _, name, wait in items if wait is not None}
        self._known = True
        self._changed()

    def put(self, kind: str, namespace: str, name: str, value: int | None) -> None:
        """One watch event: the configuration's wait now, or None (deleted, or nothing on
        pods)."""
        wait = value
        if wait is None:
            self._waits.pop(name, None)
        else:
            self._waits[name] = wait
        if self._known:
            self._changed()

    def not_served(self, kind: str, status: int) -> bool:
        """Whether a failed list is an answer: 403 (we may not read them) or 404 (not served
        here) leaves them unknown, warned; the settle time is then `--hold-settle-seconds`.
        Anything else is an error to retry."""
        if status not in (403, 404):
            return False
        self._waits, self._known = {}, False
        self._changed()
        log.warning(
            "%s: not allowed to list them (%s); GPU holds settle after --hold-settle-seconds, "
            "which must be as long as the slowest validating webhook on pods may take",
            KIND,
            status,
        )
        return True

    def _changed(self) -> None:
        longest = float(max(self._waits.values(), default=0)) if self._known else None
        if longest != self._longest:
            if longest is not None:
                log.info(
                    "validating webhooks on pods take at most %.0fs: GPU holds settle no "
                    "sooner than %.0fs",
                    longest,
                    longest + SETTLE_MARGIN,
                )
            self._longest = longest


def reduce(obj: Mapping[str, Any]) -> tuple[str, str, int | None]:
    """("", name, wait on pod creates) of one ValidatingWebhookConfiguration."""
    meta = obj.get("metadata")
    name = meta.get("name", "") if isinstance(meta, dict) else ""
    return "", name if isinstance(name, str) else "", pod_timeout(obj)
