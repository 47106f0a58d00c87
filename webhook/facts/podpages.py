"""A page of a pod list, decoded into only the fields the cache keeps of a pod.

A relist of 100k pods is mostly building Python objects for fields nobody reads (images, env,
probes, volumes, status conditions): with orjson that was two fifths of the sync's CPU. msgspec
decodes the page straight into plain dicts holding just what `objects.pod_summary` reads, and
skips the rest without building it, so `pod_summary` itself is unchanged. A page that does not
fit these shapes (no real apiserver sends one) is decoded whole with orjson, as before.

Interpreted on purpose: msgspec reads these TypedDicts' annotations at run time.
"""

from __future__ import annotations

from typing import Any, TypedDict

import msgspec
import orjson

__all__ = ["decode_pod_page"]


class _Resources(TypedDict, total=False):
    limits: Any
    requests: Any


class _Container(TypedDict, total=False):
    resources: _Resources
    restartPolicy: Any  # an init container with Always is a sidecar


class _Spec(TypedDict, total=False):
    containers: list[_Container]
    initContainers: list[_Container]
    nodeName: Any
    nodeSelector: Any
    priorityClassName: Any
    schedulerName: Any  # a sharing scheduler's pods ask part of a GPU by annotation


class _Meta(TypedDict, total=False):
    name: Any
    namespace: Any
    annotations: Any  # gpu-fraction, gpu-memory (`objects.pod_summary`)


class _Status(TypedDict, total=False):
    phase: Any


class _Pod(TypedDict, total=False):
    metadata: _Meta
    spec: _Spec
    status: _Status


# `continue` is a Python keyword: the functional form names it.
_ListMeta = TypedDict("_ListMeta", {"resourceVersion": Any, "continue": Any}, total=False)


class _PodPage(TypedDict, total=False):
    metadata: _ListMeta
    items: list[_Pod]


_DECODER = msgspec.json.Decoder(_PodPage)


def decode_pod_page(data: bytes) -> dict[str, Any]:
    """A pod list page as `pages` yields it, holding only what the cache reads of each pod."""
    try:
        return dict(_DECODER.decode(data))
    except msgspec.DecodeError:  # a shape it does not expect, or no JSON (orjson says which)
        return dict(orjson.loads(data))
