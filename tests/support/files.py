"""Manifests and folders the command-line tests write."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

GOOD_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: train
spec:
  containers:
    - name: trainer
      image: cuda:12
      resources:
        limits: {nvidia.com/gpu: 1, memory: 8Gi}
      readinessProbe: {tcpSocket: {port: 80}}
"""


def write_files(folder: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
