"""The cluster facts a rule test case is judged with: a snapshot file or inline facts.

As in `kyverno test` (a test file names the resources and values files beside it) and
gator's `verify` (a case's `inventory` of cluster objects), the facts sit with the test: a
case's `clusterSnapshot`, else its file's, else the one `rules test --cluster-snapshot`
gives. A string is a snapshot file, relative to the test file; a mapping is the facts
inline, in the same format (`apiVersion` and `kind` may be left out). A case judged
without facts leaves the cluster-aware parts of its rules unjudged, and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from webhook.facts.snapshotfile import (
    SnapshotError,
    SnapshotFile,
    StaticSnapshot,
    load_snapshot,
    snapshot_from_doc,
)
from webhook.modelerrors import describe

__all__ = ["SnapshotRef", "facts_of"]

SnapshotRef = str | dict[str, Any]
_HEAD = {"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot"}


def facts_of(
    ref: SnapshotRef, test_file: Path, where: str, cache: dict[Path, StaticSnapshot]
) -> StaticSnapshot:
    """The facts `ref` names, read once per file; `where` (the field path in the test
    file) leads every problem. Raises SnapshotError with the whole message."""
    if isinstance(ref, str):
        path = (test_file.parent / ref).resolve()
        if path not in cache:
            try:
                cache[path] = load_snapshot(path)
            except SnapshotError as exc:
                raise SnapshotError(f"{where}: {exc}") from None
        return cache[path]
    try:
        doc = SnapshotFile.model_validate({**_HEAD, **ref})
        return snapshot_from_doc(doc)
    except ValidationError as exc:
        problems = "; ".join(describe(e, SnapshotFile) for e in exc.errors(include_url=False))
        raise SnapshotError(f"{where}: {problems}") from None
    except SnapshotError as exc:
        raise SnapshotError(f"{where}: {exc}") from None
