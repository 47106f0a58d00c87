"""Tiny inputs that would expand to gigabytes: every YAML reader bounds what a document
expands to through aliases (nodes and bytes), snapshots bound their node counts, and the
command ends with exit 2 and one line naming the file, never a traceback or a crash.

The commands run under a 1 GiB address-space limit: a reader that expanded the input would
fail here at once instead of taking the machine's memory.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.paths import ROOT
from webhook.yamlinput import YamlFileError, expansion, read_document

GiB = 2**30
HEADER = "apiVersion: gpu-admission.io/v1\nkind: ClusterSnapshot\n"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GiB, GiB))


def gpu_admission(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        preexec_fn=_limited,
    )


def laughs(indent: str, levels: int = 9) -> str:
    """Mapping entries (at `indent`) whose last one expands to 9**levels strings."""
    lines = [f"{indent}l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"{indent}l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def refused(result: subprocess.CompletedProcess[str], path: Path, why: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    output = (result.stderr or result.stdout).strip()
    assert len(output.splitlines()) == 1, output
    assert str(path) in output and why in output, output


def test_a_snapshot_with_an_alias_bomb_in_a_node_pool_is_refused(tmp_path: Path) -> None:
    snapshot = tmp_path / "bomb-snapshot.yaml"
    snapshot.write_text(
        HEADER + "nodePools:\n"
        "- apiVersion: karpenter.sh/v1\n"
        "  kind: NodePool\n"
        "  metadata: {name: gpu}\n" + laughs("  ") + "  spec:\n"
        "    template:\n"
        "      spec:\n"
        "        requirements:\n"
        "        - {key: karpenter.k8s.aws/instance-gpu-count, operator: In, values: [*l8]}\n"
    )
    assert snapshot.stat().st_size < 1024
    result = gpu_admission("rules", "check", "rules", "--cluster-snapshot", str(snapshot))
    refused(result, snapshot, "through YAML aliases")


def test_a_snapshot_node_count_past_any_cluster_is_refused(tmp_path: Path) -> None:
    snapshot = tmp_path / "count-snapshot.yaml"
    snapshot.write_text(
        HEADER + "nodes:\n- name: gpu\n  count: 300000000\n  allocatable: {nvidia.com/gpu: 8}\n"
    )
    assert snapshot.stat().st_size <= 128
    result = gpu_admission("rules", "check", "rules", "--cluster-snapshot", str(snapshot))
    refused(result, snapshot, "at most 100000")


def test_a_rules_test_case_with_an_alias_bomb_is_refused(tmp_path: Path) -> None:
    case = tmp_path / "bomb-case.yaml"
    case.write_text(
        "cases:\n"
        "- name: bomb\n"
        "  expect: {allowed: true}\n"
        "  object:\n"
        "    apiVersion: v1\n"
        "    kind: Pod\n"
        "    metadata:\n"
        "      name: p\n" + laughs("      ") + "    spec:\n"
        "      containers:\n"
        "      - {name: c, image: i, args: *l8, resources: {limits: {nvidia.com/gpu: 1}}}\n"
    )
    assert case.stat().st_size < 1024
    result = gpu_admission("rules", "test", "rules", "--cases", str(case))
    assert result.returncode == 2, (result.stdout, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    (error,) = [line for line in result.stdout.splitlines() if line.startswith("ERROR ")]
    assert str(case) in error and "through YAML aliases" in error


def test_a_manifest_aliasing_one_long_string_many_times_is_refused(tmp_path: Path) -> None:
    manifest = tmp_path / "strings.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\n"
        f"metadata: {{name: p, annotations: {{a: &s {'x' * 200_000}}}}}\n"
        "spec:\n  containers:\n  - name: c\n    image: i\n"
        f"    args: [{', '.join(['*s'] * 100_000)}]\n"
    )
    assert manifest.stat().st_size < 700_000
    result = gpu_admission("review", str(manifest))
    refused(result, manifest, "MiB through YAML aliases")
    audited = gpu_admission("audit", "--rules", "rules", str(manifest), "-o", "json")
    assert audited.returncode == 2 and "Traceback" not in audited.stderr
    assert "MiB through YAML aliases" in audited.stdout


def test_aliases_within_the_bounds_are_read_as_safe_load_reads_them(tmp_path: Path) -> None:
    """Anchors are how some manifests share an env list: a few are fine everywhere."""
    text = "env: &env [{name: A, value: '1'}]\ncontainers:\n- {name: a, env: *env}\n"
    path = tmp_path / "ok.yaml"
    path.write_text(text)
    assert read_document(path) == yaml.safe_load(text)


# --- the bound itself, against the expanded document ---------------------------------------

leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))


def _expanded(value: Any) -> tuple[int, int]:
    """(nodes, bytes) of `value` written out in full: what `expansion` must count without
    writing it out."""
    if isinstance(value, dict):
        counted = [_expanded(v) for v in value.values()]
        keys = sum(len(k) if isinstance(k, str) else 8 for k in value)
        return 1 + sum(n for n, _ in counted), keys + sum(b for _, b in counted)
    if isinstance(value, list):
        counted = [_expanded(v) for v in value]
        return 1 + sum(n for n, _ in counted), sum(b for _, b in counted)
    return 1, len(value) if isinstance(value, str) else 8


@st.composite
def shared_trees(draw: Any) -> Any:
    """A tree whose collections may be shared (as aliases share them), built bottom-up."""
    pool: list[Any] = [draw(leaves) for _ in range(draw(st.integers(1, 4)))]
    for _ in range(draw(st.integers(1, 8))):
        parts = draw(st.lists(st.sampled_from(range(len(pool))), min_size=0, max_size=5))
        if draw(st.booleans()):
            pool.append([pool[i] for i in parts])
        else:
            pool.append({f"k{n}": pool[i] for n, i in enumerate(parts)})
    return pool[-1]


@settings(max_examples=300, deadline=None)
@given(tree=shared_trees(), max_nodes=st.integers(1, 400), max_bytes=st.integers(0, 400))
def test_the_bound_counts_what_the_document_expands_to(
    tree: Any, max_nodes: int, max_bytes: int
) -> None:
    nodes, size = _expanded(tree)
    why = expansion(tree, max_nodes=max_nodes, max_bytes=max_bytes)
    assert (why is None) == (nodes <= max_nodes and size <= max_bytes), (nodes, size, why)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tree=shared_trees(), max_nodes=st.integers(1, 400))
def test_any_yaml_with_aliases_is_read_whole_or_refused_in_one_line(
    tmp_path: Path, tree: Any, max_nodes: int
) -> None:
    """What a user may hand any reader: the value safe_load reads, or one line saying why
    not (safe_dump writes shared collections as anchors and aliases)."""
    text = yaml.safe_dump({"doc": tree})
    path = tmp_path / "doc.yaml"
    path.write_text(text)
    try:
        value = read_document(path, max_nodes=max_nodes)
    except YamlFileError as exc:
        assert len(str(exc).splitlines()) == 1 and str(exc).startswith(f"{path}: ")
        assert _expanded(yaml.safe_load(text))[0] > max_nodes
    else:
        assert value == yaml.safe_load(text)


def test_a_document_that_contains_itself_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("a: &a [x, *a]\n")
    with pytest.raises(YamlFileError, match=r"loop\.yaml: contains itself through a YAML alias"):
        read_document(path)
