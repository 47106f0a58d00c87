"""Where the rules come from, the same for serve, audit and rules: the folder given, else
$GPU_ADMISSION_RULES, else ./rules when there is one, else the built-in defaults, so the CLI
works anywhere, not only inside this repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: c
    image: x
    resources: {limits: {nvidia.com/gpu: "0.5"}}
"""


def _run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "GPU_ADMISSION_RULES"}
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_outside_the_repository_the_built_in_defaults_judge(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    result = _run(tmp_path, "audit", "pod.yaml", "-o", "json")
    assert result.returncode == 1, result.stderr  # denied: half a GPU
    assert '"gpu-whole-quantity"' in result.stdout
    check = _run(tmp_path, "rules", "check")
    assert check.returncode == 0 and "the built-in defaults" in check.stdout


def test_the_environment_then_a_local_rules_folder_are_used(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    (quiet / "a.yaml").write_text("rules:\n  gpu-whole-quantity: {mode: warn}\n")
    assert _run(tmp_path, "audit", "pod.yaml", GPU_ADMISSION_RULES=str(quiet)).returncode == 0
    local = tmp_path / "rules"
    local.mkdir()
    (local / "a.yaml").write_text("mode: audit\n")
    assert _run(tmp_path, "audit", "pod.yaml").returncode == 0  # ./rules: shadow mode
    # The environment wins over ./rules; a broken ./rules says it was found implicitly.
    env = _run(tmp_path, "audit", "pod.yaml", GPU_ADMISSION_RULES=str(quiet))
    assert env.returncode == 0
    (local / "a.yaml").write_text("groups: [prometheus]\n")  # some other tool's rules
    broken = _run(tmp_path, "audit", "pod.yaml")
    assert broken.returncode == 2 and "found in the working directory" in broken.stderr
    given = _run(tmp_path, "audit", "pod.yaml", "--rules", str(tmp_path / "missing"))
    assert given.returncode == 2 and "missing: no such folder or file" in given.stderr
