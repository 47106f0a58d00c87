"""The `kubernetes` client call that lists and watches each kind the cache keeps.

Apart from `watched.py`, whose table of kinds (reducers and stores) holds no I/O: only the
list+watch drivers (the live cache, `snapshot`) import the client.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from webhook.facts.watched import Kind

__all__ = ["list_call"]

_ALL = "_for_all_namespaces"


def list_call(api_client: Any, kind: Kind, *, namespace: str | None = None) -> Callable[..., Any]:
    """The client call that lists (and, with `watch=True`, watches) `kind`: in every
    namespace, or only in `namespace` (for a namespaced kind)."""
    from kubernetes import client

    if kind.api == "custom":
        custom = client.CustomObjectsApi(api_client)
        plural = kind.name.partition(".")[0]  # `localqueues.v1beta1`: the older version's
        if namespace is not None:
            return functools.partial(
                custom.list_namespaced_custom_object, kind.group, kind.version, namespace, plural
            )
        return functools.partial(getattr(custom, kind.method), kind.group, kind.version, plural)
    api = {
        "core": client.CoreV1Api,
        "scheduling": client.SchedulingV1Api,
        "admissionregistration": client.AdmissionregistrationV1Api,
    }[kind.api]
    if namespace is not None:
        if not kind.method.endswith(_ALL):
            raise ValueError(f"{kind.name} is not a namespaced kind")
        resource = kind.method.removesuffix(_ALL).removeprefix("list_")
        return functools.partial(getattr(api(api_client), f"list_namespaced_{resource}"), namespace)
    fn: Callable[..., Any] = getattr(api(api_client), kind.method)
    return fn
