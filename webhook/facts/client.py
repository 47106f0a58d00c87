"""The `kubernetes` client call that lists and watches each kind the cache keeps.

Apart from `watched.py`, whose kind table the pure relist code reads: only the list+watch
drivers import the client.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from webhook.facts.watched import Kind

__all__ = ["list_call"]


def list_call(api_client: Any, kind: Kind) -> Callable[..., Any]:
    """The client call that lists (and, with `watch=True`, watches) `kind`."""
    from kubernetes import client

    if kind.api == "custom":
        custom = client.CustomObjectsApi(api_client)
        plural = kind.name.partition(".")[0]  # `localqueues.v1beta1`: the older version's
        return functools.partial(getattr(custom, kind.method), kind.group, kind.version, plural)
    api = {
        "core": client.CoreV1Api,
        "scheduling": client.SchedulingV1Api,
        "admissionregistration": client.AdmissionregistrationV1Api,
    }[kind.api]
    fn: Callable[..., Any] = getattr(api(api_client), kind.method)
    return fn
