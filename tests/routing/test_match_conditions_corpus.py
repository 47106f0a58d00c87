"""The webhooks' matchConditions against the corpus of real manifests (../shared/corpus):
they evaluate without error on every object, and send every object the webhook must see."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from tests.support.manifests import CORPUS, RULES, routed
from tests.support.routing import needs_webhook, selects
from webhook.engine.compiled import compile_rules


def _without_nulls(value: Any) -> Any:
    """What the apiserver hands CEL: typed decoding (built-in kinds) and pruning (CRDs) drop
    the nulls that an empty `resources:` or `env:` key leaves in a YAML file."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _corpus() -> list[tuple[str, dict[str, Any]]]:
    if not CORPUS.is_dir():
        return []
    docs = []
    for path in sorted(CORPUS.iterdir()):
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue  # a few files are broken as published
        for i, doc in enumerate(loaded):
            if isinstance(doc, dict):
                docs.append((f"{path.stem}#{i}-{doc.get('kind')}", _without_nulls(doc)))
    return docs


def _corpus_cases(only_routed: bool) -> list[Any]:
    docs = _corpus()
    if not docs:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS} is absent"))]
    cases = []
    for doc_id, doc in docs:
        if only_routed and not routed(doc):
            continue
        cases.append(pytest.param(doc, id=doc_id))
    return cases


@pytest.mark.parametrize("doc", _corpus_cases(only_routed=False))
def test_the_match_conditions_evaluate_without_error_on_every_corpus_object(
    doc: dict[str, Any],
) -> None:
    # A missing has() guard or a type mismatch raises here; in the apiserver an evaluation
    # error counts as a webhook failure (and refuses the object under failurePolicy Fail).
    selects(doc)
    selects(doc, operation="UPDATE", old=doc)


@pytest.mark.parametrize("doc", _corpus_cases(only_routed=True))
def test_the_match_conditions_send_every_corpus_object_the_webhook_needs(
    doc: dict[str, Any],
) -> None:
    # A superset by design: e.g. a keyless NoExecute-only toleration is sent, though it does
    # not tolerate the GPU taint. Never the other way round.
    if needs_webhook(doc):
        assert selects(doc)


def test_the_corpus_has_objects_on_both_sides_of_the_match_conditions() -> None:
    docs = [doc for _, doc in _corpus() if routed(doc)]
    if not docs:
        pytest.skip(f"{CORPUS} is absent")
    chosen = [selects(doc) for doc in docs]
    assert sum(chosen) >= 20, "too few GPU objects: the corpus test above proves little"
    assert len(chosen) - sum(chosen) >= 5, "too few non-GPU objects to show any are left out"


def test_plain_corpus_pods_are_never_sent() -> None:
    """A pod spec with none of the tell-tales (no GPU name, device variable, privileged mode,
    hostPath, GPU taint or label, nodeName, DRA claim...: the server's fast-path markers, read
    off the object's bytes) is not sent, however the new privileged and hostPath routes read."""
    rules = compile_rules(RULES)
    plain = [
        (doc_id, doc)
        for doc_id, doc in _corpus()
        if routed(doc) and not rules.might_apply(orjson.dumps(doc))
    ]
    if not plain:
        pytest.skip(f"{CORPUS} is absent")
    assert len(plain) >= 5, "too few plain objects in the corpus to prove anything"
    sent = [doc_id for doc_id, doc in plain if selects(doc)]
    assert sent == []


def test_privileged_and_host_path_corpus_pods_are_sent() -> None:
    """Device plugins, node agents and log shippers of the corpus that ask for no GPU: sent,
    so an untainted GPU node they reach is judged."""
    found = [
        (doc_id, doc)
        for doc_id, doc in _corpus()
        if routed(doc)
        and (b'"privileged":true' in orjson.dumps(doc) or b'"hostPath"' in orjson.dumps(doc))
    ]
    if not found:
        pytest.skip(f"{CORPUS} is absent")
    assert [doc_id for doc_id, doc in found if not selects(doc)] == []
