"""Shell completion as users load it: `gpu-admission completion bash|zsh` sourced into the
shell, and the shell asked to complete subcommands, choices, files and folders."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.files import GOOD_POD, write_files  # the same manifest and folder writer


def _completion_script(shell: str, tmp_path: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "completion", shell],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    path = tmp_path / f"gpu-admission.{shell}"
    path.write_text(result.stdout)
    return path


def _complete_bash(script: Path, cwd: Path, *words: str) -> list[str]:
    """What bash offers for the last of `words`, as readline asks the completion function."""
    program = (
        f"source {_quote(str(script))}\n"
        f"COMP_WORDS=({' '.join(_quote(w) for w in ('gpu-admission', *words))})\n"
        f"COMP_CWORD={len(words)}\n"
        "complete -p gpu-admission >/dev/null\n"  # the script registered itself
        "_shtab_gpu_admission\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", program],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line]


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def test_bash_completion_script_parses_and_completes(tmp_path: Path) -> None:
    script = _completion_script("bash", tmp_path)
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr

    write_files(tmp_path, {"k8s/pod.yaml": GOOD_POD, "kube/config": "", "rules/x.yaml": ""})
    assert _complete_bash(script, tmp_path, "au") == ["audit"]
    assert set(_complete_bash(script, tmp_path, "")) >= {"audit", "serve", "completion"}
    assert "json" in _complete_bash(script, tmp_path, "audit", "-o", "")
    assert _complete_bash(script, tmp_path, "audit", "--only") == ["--only-failed"]
    # File arguments complete paths: the audit's positional paths, files after options;
    # folder arguments (`certs generate --out`) only folders; --rules takes either.
    assert _complete_bash(script, tmp_path, "audit", "k8s/p") == ["k8s/pod.yaml"]
    assert _complete_bash(script, tmp_path, "audit", "--kubeconfig", "kube/c") == ["kube/config"]
    assert _complete_bash(script, tmp_path, "review", "k8s/") == ["k8s/pod.yaml"]
    assert _complete_bash(script, tmp_path, "audit", "--rules", "ru") == ["rules"]
    assert _complete_bash(script, tmp_path, "audit", "--rules", "rules/") == ["rules/x.yaml"]
    assert _complete_bash(script, tmp_path, "certs", "generate", "--out", "ru") == ["rules"]
    assert _complete_bash(script, tmp_path, "certs", "generate", "--out", "rules/") == []


def test_zsh_completion_script_completes_paths_for_file_arguments(tmp_path: Path) -> None:
    text = _completion_script("zsh", tmp_path).read_text()
    assert text.startswith("#compdef gpu-admission\n")
    assert "audit:'evaluate manifests" in text
    audit_paths = re.search(r'^\s*"\(\*\)::files or folders.*:_files"$', text, re.M)
    assert audit_paths, "audit's paths complete files"
    assert re.search(r"--rules\[.*:PATH:_files\"$", text, re.M), "--rules completes both"
    assert re.search(r"--out\[folder.*:_files -/\"$", text, re.M), "certs --out: folders"


def test_zsh_completion_script_parses_and_registers(tmp_path: Path) -> None:
    """Both ways docs/audits.md gives: a file `_gpu-admission` on fpath, and eval after compinit."""
    if shutil.which("zsh") is None:
        missing = "zsh is not installed: run `make test-packages`"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the zsh test, but {missing}")
        pytest.skip(missing)
    script = _completion_script("zsh", tmp_path)
    checked = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    functions = tmp_path / "zfunc"
    functions.mkdir()
    shutil.copy(script, functions / "_gpu-admission")
    program = (
        f"fpath=({functions} $fpath); autoload -Uz compinit; compinit -u -d {tmp_path}/dump1\n"
        'print -r -- "fpath=${_comps[gpu-admission]}"\n'
        f"unset '_comps[gpu-admission]'; fpath=(${{fpath:#{functions}}})\n"
        f'eval "$(<{script})"\n'
        'print -r -- "eval=${_comps[gpu-admission]}"\n'
    )
    result = subprocess.run(
        ["zsh", "-f", "-c", program], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["fpath=_gpu-admission", "eval=_shtab_gpu_admission"]


def test_completion_needs_a_known_shell() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "completion", "fish"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "fish" in result.stderr and "bash" in result.stderr  # what was given, what is known
