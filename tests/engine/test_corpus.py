"""Real manifests written by other projects, admitted end to end.

Each pod template in ../shared/corpus/manifests goes through /mutate and /validate over HTTPS.
Beyond "no 5xx and schema-valid output", FACTS.tsv (extracted by the corpus's own tool, not by
us) is the oracle for what a platform engineer expects: a GPU template with no GPU toleration
gets one, one with no /dev/shm gets it, a fractional GPU is denied, and a hand-set
NVIDIA_VISIBLE_DEVICES is denied outside the exempt namespaces.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import CORPUS
from tests.support.schema import pod_specs_as_pods, schema_errors
from tests.support.webhook import Webhook
from webhook.engine.checks.kserve import runtime_merge
from webhook.engine.podviews import BUILTIN_GROUPS, group_of, holds_pods, pod_views
from webhook.ruleset.models import RuleSet

MANIFESTS = CORPUS / "manifests"
RULES = RuleSet()


def _manifest_files() -> list[Path]:
    return sorted(MANIFESTS.iterdir()) if MANIFESTS.is_dir() else []


def _documents(path: Path) -> list[Any]:
    try:
        return list(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError:
        return []  # the corpus holds a few files that are broken as published


@pytest.mark.skipif(not _manifest_files(), reason="../shared/corpus/manifests is absent")
@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: p.name[:90])
def test_corpus_manifest_is_admitted_cleanly(webhook: Webhook, path: Path) -> None:
    for doc in _documents(path):
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
            continue
        namespace = (doc.get("metadata") or {}).get("namespace") or "ml-team"
        mutation = webhook.mutate(doc, namespace=namespace)
        assert mutation.allowed, mutation.message
        mutated = mutation.apply(doc)
        verdict = webhook.validate(mutated, namespace=namespace)
        assert all(len(w) <= 120 for w in verdict.warnings)
        assert webhook.mutate(mutated, namespace=namespace).patch == []
        group = group_of(doc.get("apiVersion"))
        if not holds_pods(group, doc["kind"]):
            assert mutation.patch == []
            continue
        if not mutation.patch:
            continue
        # A patched object must stay valid wherever the original was: the whole object for
        # built-in kinds, and every pod spec inside (CRDs embed plain PodSpecs).
        if group in BUILTIN_GROUPS and not schema_errors(doc):
            assert schema_errors(mutated) == []
        before, after = pod_specs_as_pods(doc), pod_specs_as_pods(mutated)
        for pointer, pod in before.items():
            if not schema_errors(pod):
                assert schema_errors(after[pointer]) == [], pointer


@dataclass
class Row:
    file: str
    doc: int
    kind: str
    path: str
    flags: str
    gpu_limits: str
    gpu_requests: str
    visible: str
    scheduler: str = "-"
    annotations: str = "-"


def _facts() -> list[Row]:
    table = CORPUS / "FACTS.tsv"
    if not table.is_file():
        return []
    rows = []
    with table.open() as fh:
        for r in csv.DictReader(fh, delimiter="\t"):
            known = holds_pods(group_of(r["api_version"]), r["kind"])
            if known and r["pod_spec_path"] != "-":
                rows.append(
                    Row(
                        r["file"],
                        int(r["doc_index"]),
                        r["kind"],
                        r["pod_spec_path"],
                        r["flags"],
                        r["gpu_limits"],
                        r["gpu_requests"],
                        r["nvidia_visible_devices"],
                        r["scheduler_name"],
                        r["gpu_annotations"],
                    )
                )
    return rows


def _asks(column: str) -> list[tuple[bool, str, float]]:
    """(init?, resource, value) for each `container:resource=value` entry that we call a GPU."""
    out = []
    for entry in re.findall(r"(init:)?[^:,;]+:([^=,;]+)=([^,;]+)", column):
        init, name, value = entry
        if RULES.gpu_names().matches(name):
            try:
                out.append(
                    (
                        bool(init),
                        name,
                        float(value.rstrip("m")) / (1000 if value.endswith("m") else 1),
                    )
                )
            except ValueError:
                continue
    return out


def _row_id(row: Row) -> str:
    return f"{row.file[:70]}#{row.doc}:{row.path}"


@pytest.mark.skipif(not _facts(), reason="../shared/corpus/FACTS.tsv is absent")
@pytest.mark.parametrize("row", _facts(), ids=_row_id)
def test_corpus_verdicts_match_what_a_platform_engineer_expects(webhook: Webhook, row: Row) -> None:
    doc = _documents(MANIFESTS / row.file)[row.doc]
    namespace = (doc.get("metadata") or {}).get("namespace") or "ml-team"
    mutated, mutation, verdict = webhook.admit(doc, namespace=namespace)
    view = next(
        v
        for v in pod_views(
            mutated,
            group=group_of(doc["apiVersion"]),
            kind=row.kind,
            is_gpu=RULES.gpu_names().matches,
        )
        if v.field_path == row.path
    )
    asks = _asks(row.gpu_limits) + _asks(row.gpu_requests)
    gpu = any(value > 0 for _, _, value in asks)
    main_gpu = any(value > 0 and not init for init, _, value in asks)
    exempt = namespace in RULES.exemptions.all_namespaces

    if exempt:
        assert mutation.patch == [] and verdict.allowed
        return
    if not view.mutable:
        # Judged only (TrainJob, NIMService): the operator's pods get the mutations when
        # they are created, so nothing here is patched.
        assert not any(op["path"].startswith(view.pointer + "/") for op in mutation.patch)
    elif "NO_NVIDIA_GPU_TOLERATION" in row.flags and any(
        v > 0 and n.startswith("nvidia.com/") for _, n, v in asks
    ):
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
            view.spec.get("tolerations") or []
        )
    shm_elsewhere = runtime_merge(view, None) is not None or not view.shm
    if "NO_DEV_SHM" in row.flags and main_gpu and view.mutable and shm_elsewhere:
        # KServe merges this predictor over a serving runtime (an LLMInferenceService over
        # its configs) that may bring its own /dev/shm, which ours would replace: with no
        # cluster facts none is added, and a warning says so.
        assert "gpu-shm" in verdict.warned_rules
    elif "NO_DEV_SHM" in row.flags and main_gpu and view.mutable:
        assert any(
            m.get("mountPath") == "/dev/shm"
            for c in view.main_containers
            if c.asks_gpu
            for m in c.raw.get("volumeMounts") or []
        )
    if "GPU_FRACTIONAL" in row.flags and gpu:
        assert "gpu-whole-quantity" in verdict.denied_rules
    if "GPU_IN_REQUESTS_ONLY" in row.flags and gpu and view.mutable:
        assert any("/resources/limits" in op["path"] for op in mutation.patch)
    hand_set = [v.split("=", 1)[1] for v in re.split(r"[;,]", row.visible) if "=" in v]
    if any(value not in ("void", "none", "") for value in hand_set):
        assert "visible-devices" in verdict.denied_rules
    sharing = RULES.gpu_sharing
    noted = dict(a.split("=", 1) for a in row.annotations.split(";") if "=" in a)
    shared = row.scheduler in sharing.schedulers and any(a in noted for a in sharing.annotations)
    if shared and view.mutable:
        # Part of a GPU from a GPU-sharing scheduler (KAI's own examples): a GPU pod, with
        # the toleration of the shared GPU and /dev/shm in a shared regular container.
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
            view.spec.get("tolerations") or []
        )
        named = noted.get(sharing.container_annotation)
        target = next(
            (c for c in view.containers if not c.init and (named is None or c.name == named)),
            None,
        )
        if target is not None:
            mounts = target.raw.get("volumeMounts") or []
            assert any(m.get("mountPath") == "/dev/shm" for m in mounts), target.name
    if not gpu and not hand_set and not shared:
        # A pod spec that asks for no GPU is left alone, but for NVIDIA_VISIBLE_DEVICES=void
        # in its containers when it can land on a GPU node (a GPU toleration, say).
        for op in mutation.patch:
            if op["path"].startswith(view.pointer + "/"):
                assert op["op"] == "add" and "/env" in op["path"], op
                assert _VOID in (op["value"] if isinstance(op["value"], list) else [op["value"]])


_VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
