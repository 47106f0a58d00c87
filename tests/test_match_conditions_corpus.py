"""The webhooks' matchConditions against the corpus of real manifests (../shared/corpus):
they evaluate without error on every object, and send every object the webhook must see."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from manifests_support import CORPUS, routed
from test_match_conditions import needs_webhook, selects


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
