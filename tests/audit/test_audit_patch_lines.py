"""`audit --show-patch`: each hunk of the shown diff is headed by where its change lands in
the audited file, not by line numbers of the YAML the diff is made of (which rewrites flow
style, drops comments and renumbers everything)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from webhook.cli import main

# Two objects in one file, the second with comments and flow style, so the rewrite's line
# numbers and the file's differ; the GPU only in requests is copied into limits (line 21's
# field), the container gets /dev/shm (the container at line 16) and the pod a toleration
# (its spec at line 14).
MANIFESTS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
data: {a: b}
---
# a comment the rewrite drops
apiVersion: apps/v1
kind: Deployment
metadata: {name: trainer, namespace: ml}
spec:
  replicas: 1
  selector: {matchLabels: {app: t}}
  template:
    metadata: {labels: {app: t}}
    spec:
      containers:
        - name: train   # the one GPU container
          image: trainer:1
          resources:
            requests: {nvidia.com/gpu: 1, memory: 8Gi}
            limits: {memory: 8Gi}
"""


def _hunks(out: str) -> list[str]:
    return re.findall(r"^\s*(@@ .* @@)$", out, flags=re.M)


def test_each_hunk_names_the_file_line_its_change_lands_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(MANIFESTS)
    main(["audit", str(path), "--show-patch", "--no-colour"])
    hunks = _hunks(capsys.readouterr().out)
    assert hunks, "a patched object shows its diff"
    lines = MANIFESTS.splitlines()
    for hunk in hunks:
        where = re.fullmatch(rf"@@ {re.escape(str(path))}:(\d+) @@", hunk)
        assert where is not None, hunk
        assert 6 <= int(where[1]) <= len(lines)  # inside the Deployment, never the ConfigMap
    landed = {lines[int(re.findall(r":(\d+) @@", h)[0]) - 1].strip() for h in hunks}
    assert landed <= {
        "limits: {memory: 8Gi}",
        "- name: train   # the one GPU container",
        "containers:",
        "spec:",
    }, landed
    assert "limits: {memory: 8Gi}" in landed  # the copy of the GPU into limits


def test_stdin_hunks_name_lines_of_the_text_read(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(MANIFESTS))
    main(["audit", "-", "--show-patch", "--no-colour"])
    hunks = _hunks(capsys.readouterr().out)
    assert hunks
    lines = MANIFESTS.splitlines()
    for hunk in hunks:
        where = re.fullmatch(r"@@ -:(\d+) @@", hunk)  # stdin is named "-", as in findings
        assert where is not None, hunk
        assert 6 <= int(where[1]) <= len(lines)
