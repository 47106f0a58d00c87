"""A relist's pod pages are decoded into only what the cache keeps of a pod: whatever a page
holds, the summaries (and so quota and holds) are those of the whole objects."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import CORPUS
from tests.support.schema import pod_specs_as_pods
from webhook.engine.podviews import UnreadableObject
from webhook.facts.objects import pod_summary
from webhook.facts.podpages import decode_pod_page

MANIFESTS = CORPUS / "manifests"


def _product(node: str) -> str:
    return {"h100-0": "NVIDIA-H100-80GB-HBM3"}.get(node, "")


def _page(pods: list[Any], **meta: Any) -> bytes:
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": pods})


def _same_summaries(pods: list[Any]) -> None:
    body = _page(pods)
    whole, kept = orjson.loads(body), decode_pod_page(body)
    assert len(kept["items"]) == len(pods)
    for full, slim in zip(whole["items"], kept["items"], strict=True):
        assert pod_summary(slim, _product) == pod_summary(full, _product)


def test_a_page_keeps_the_list_metadata_and_what_a_summary_reads() -> None:
    pod = {
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "u", "labels": {"a": "b"}},
        "spec": {
            "nodeName": "h100-0",
            "priorityClassName": "gpu-training",
            "containers": [
                {
                    "name": "main",
                    "image": "pytorch",
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ],
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"x/y": 1}}}
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready"}]},
    }
    kept = decode_pod_page(_page([pod], resourceVersion="42", **{"continue": "next"}))
    assert kept["metadata"] == {"resourceVersion": "42", "continue": "next"}
    (slim,) = kept["items"]
    assert slim["spec"]["containers"] == [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    assert "env" not in str(slim) and "conditions" not in str(slim)
    summary = pod_summary(slim, _product)
    assert summary is not None and summary.product == "NVIDIA-H100-80GB-HBM3"
    assert summary.priority_class == "gpu-training"
    _same_summaries([pod])


def test_a_page_in_a_shape_no_apiserver_sends_is_read_whole() -> None:
    odd = [
        {"metadata": {"name": "a", "namespace": "n"}, "spec": {"containers": "not a list"}},
        {"metadata": {"name": "b", "namespace": "n"}, "spec": {"containers": [7]}},
    ]
    assert decode_pod_page(_page(odd))["items"] == odd
    with pytest.raises(orjson.JSONDecodeError):
        decode_pod_page(b'{"items": [')


_QUANTITY = st.one_of(
    st.sampled_from(["1", "2", "500m", "0", "-1", "1Gi", "x", ""]), st.integers(-2, 9), st.none()
)
_AMOUNTS = st.one_of(
    st.dictionaries(
        st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "cpu", "memory", "hugepages-2Mi/x"]),
        _QUANTITY,
        max_size=3,
    ),
    st.none(),
    st.just("oops"),
)
_CONTAINER = st.one_of(
    st.fixed_dictionaries(
        {"name": st.just("c")},
        optional={
            "resources": st.one_of(
                st.fixed_dictionaries({}, optional={"limits": _AMOUNTS, "requests": _AMOUNTS}),
                st.none(),
            ),
            "restartPolicy": st.sampled_from(["Always", "Never", None]),
            "image": st.text(max_size=5),
        },
    ),
    st.none(),
    st.integers(),
)
_POD = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"name": st.just("p"), "namespace": st.just("ns")})},
    optional={
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.one_of(st.lists(_CONTAINER, max_size=3), st.none()),
                "initContainers": st.one_of(st.lists(_CONTAINER, max_size=2), st.none()),
                "nodeName": st.sampled_from(["h100-0", "other", "", None]),
                "nodeSelector": st.one_of(
                    st.none(), st.just({"nvidia.com/gpu.product": "NVIDIA-L4"})
                ),
                "priorityClassName": st.sampled_from(["gpu-batch", None]),
            },
        ),
        "status": st.fixed_dictionaries({}, optional={"phase": st.sampled_from(["Running", None])}),
    },
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_POD, max_size=4))
def test_any_page_gives_the_summaries_of_the_whole_pods(pods: list[Any]) -> None:
    _same_summaries(pods)


def _corpus_pods() -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    for path in sorted(MANIFESTS.iterdir()) if MANIFESTS.is_dir() else []:
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except (yaml.YAMLError, UnicodeDecodeError):
            continue
        for doc in docs:
            if isinstance(doc, dict) and isinstance(doc.get("kind"), str):
                try:
                    pods.extend(pod_specs_as_pods(doc).values())
                except UnreadableObject:  # published broken: no pod spec to compare
                    continue
    return pods


@pytest.mark.skipif(not MANIFESTS.is_dir(), reason="../shared/corpus/manifests is absent")
def test_every_corpus_pod_spec_gives_the_summary_of_the_whole_pod() -> None:
    pods = _corpus_pods()
    assert pods
    for i in range(0, len(pods), 500):
        _same_summaries(pods[i : i + 500])
