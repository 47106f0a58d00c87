"""CI integration as users wire it up: the pre-commit hook run by pre-commit itself on a real git
repository, and the GitHub Action's steps run the way a runner runs them (shell completion:
tests/cli/test_completion.py).

The hook and the action each pip-install the package into a fresh environment, as they do for
a user (from the package index pip is configured with): that is most of this file's time, so each is
installed once, in one test, and serves every scenario of that test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.files import GOOD_POD, write_files
from tests.support.paths import ROOT
from webhook.audit.reports import FORMATS

# What `pip install .` of a checkout reads: the package and the metadata files pyproject names.
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE")
INSTALL_TIMEOUT = 600

# Half a GPU: the webhook denies it (gpu-whole-quantity) under the default rules.
DENIED_POD = GOOD_POD.replace("name: train", "name: half").replace(
    "nvidia.com/gpu: 1", 'nvidia.com/gpu: "500m"'
)
# Allowed, but warned: no readinessProbe on a GPU container that serves (declares a port).
WARNED_POD = "\n".join(
    "      ports: [{containerPort: 80}]" if "readinessProbe" in line else line
    for line in GOOD_POD.splitlines()
)
NOT_A_MANIFEST = "on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n"
DENY_RULE = "gpu-whole-quantity"


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without git's per-repository variables (set when the suite
    runs from a git hook, they would point every git command at the project's repository)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    # Byte-compiling every dependency at install costs seconds and tests nothing here.
    env["PIP_NO_COMPILE"] = "1"
    env.update(extra)
    return env


def _git(cwd: Path, *args: str) -> str:
    """git with a fixed identity and no signing, whatever the machine's git config says."""
    result = subprocess.run(
        [
            "git",
            "-c",
            "user.name=gpu-admission tests",
            "-c",
            "user.email=tests@gpu-admission.invalid",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        cwd=cwd,
        env=_clean_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()


def _checkout(dest: Path, *extra: str) -> Path:
    """The package as a clone of this repository holds it, taken from the work tree so that
    uncommitted edits are what gets tested: the webhook package, the metadata files and `extra`."""
    dest.mkdir(parents=True)
    shutil.copytree(
        ROOT / "webhook", dest / "webhook", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in (*PACKAGE_FILES, *extra):
        shutil.copy2(ROOT / name, dest / name)
    return dest


# --- pre-commit hook ---------------------------------------------------------------------------


def test_the_hooks_file_declares_the_audit_hook_for_manifest_files() -> None:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "gpu-admission-audit"
    assert hook["entry"].split()[:2] == ["gpu-admission", "audit"]
    assert hook["language"] == "python"
    assert hook.get("pass_filenames", True) is True
    files = re.compile(hook["files"])
    for name in ("k8s/pod.yaml", "a.yml", "list.json"):
        assert files.search(name), name
    for name in ("README.md", "pod.yaml.bak", "Dockerfile"):
        assert not files.search(name), name


def test_pre_commit_hook_passes_good_manifests_and_fails_a_denied_pod(tmp_path: Path) -> None:
    """The hook installed by pre-commit from a git repository, as a user's
    .pre-commit-config.yaml names it, then run on what is staged: only changed files count.

    `pre-commit try-repo` does the same with a throwaway store, so each call would install the
    environment again; a config and one PRE_COMMIT_HOME install it once for both commits."""
    hook_repo = _checkout(tmp_path / "hook-repo", ".pre-commit-hooks.yaml")
    _git(hook_repo, "init", "-q")
    _git(hook_repo, "add", "-A")
    _git(hook_repo, "commit", "-q", "-m", "snapshot")
    rev = _git(hook_repo, "rev-parse", "HEAD")

    user = tmp_path / "user-repo"
    user.mkdir()
    _git(user, "init", "-q")
    # Already committed and not touched again: a commit that leaves it alone must not fail on it.
    write_files(user, {"k8s/legacy.yaml": DENIED_POD, "notes.txt": "not yaml\n"})
    _git(user, "add", "-A")
    _git(user, "commit", "-q", "-m", "before the hook")
    config = {
        "repos": [{"repo": str(hook_repo), "rev": rev, "hooks": [{"id": "gpu-admission-audit"}]}]
    }
    write_files(user, {".pre-commit-config.yaml": yaml.safe_dump(config)})
    env = _clean_env(PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"))

    def pre_commit_run() -> tuple[int, str]:
        """`pre-commit run` as the git hook runs it before a commit: on the staged files."""
        _git(user, "add", "-A")
        result = subprocess.run(
            [sys.executable, "-m", "pre_commit", "run", "--color", "never", "--verbose"],
            cwd=user,
            env=env,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
        return result.returncode, result.stdout + result.stderr

    write_files(user, {"k8s/train.yaml": GOOD_POD, ".github/workflows/ci.yml": NOT_A_MANIFEST})
    code, out = pre_commit_run()
    assert code == 0, out
    assert re.search(r"gpu-admission audit\.+Passed", out), out  # ran on files, not Skipped
    assert "legacy.yaml" not in out

    _git(user, "commit", "-q", "-m", "a good pod")
    write_files(user, {"k8s/serve.yaml": DENIED_POD})
    code, out = pre_commit_run()
    assert code == 1, out
    assert re.search(r"gpu-admission audit\.+Failed", out), out
    assert "k8s/serve.yaml" in out
    assert DENY_RULE in out
    assert "legacy.yaml" not in out and "train.yaml" not in out


# --- GitHub Action -----------------------------------------------------------------------------

_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}")


def _action() -> dict[str, Any]:
    action: dict[str, Any] = yaml.safe_load((ROOT / "action.yml").read_text())
    return action


def _value(expr: str, context: Mapping[str, str]) -> str:
    expr = expr.strip()
    literal = re.fullmatch(r"'([^']*)'", expr)
    if literal:
        return literal.group(1)
    # Outputs a step never wrote are empty strings to the runner, as here.
    if expr.startswith("steps.") and ".outputs." in expr:
        return context.get(expr, "")
    assert expr in context, f"action.yml uses ${{{{ {expr} }}}}, unknown to this test's runner"
    return context[expr]


def _expand(text: str, context: Mapping[str, str]) -> str:
    """`${{ ... }}` in a value, for the few expressions action.yml uses."""
    return _EXPRESSION.sub(lambda m: _value(m.group(1), context), text)


def _condition(expr: str, context: Mapping[str, str]) -> bool:
    """A step's `if:`: terms joined by &&, each always(), or a comparison with == or !=."""
    result = True
    for term in _EXPRESSION.sub(lambda m: m.group(1), expr).split("&&"):
        term = term.strip()
        if term == "always()":
            continue
        match = re.fullmatch(r"(\S+)\s*(==|!=)\s*(\S+)", term)
        assert match, f"action.yml: `if: {expr}` is beyond this test's runner"
        left, op, right = match.groups()
        equal = _value(left, context) == _value(right, context)
        result = result and (equal if op == "==" else not equal)
    return result


def _outputs(path: Path) -> dict[str, str]:
    """The name=value lines a step appended to $GITHUB_OUTPUT."""
    if not path.exists():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


class Runner:
    """Runs action.yml's `run` steps as a GitHub runner does (`shell: bash` is
    `bash --noprofile --norc -eo pipefail FILE`, env from the step's `env`), and records the
    `uses` steps it would run with their expanded `with`."""

    def __init__(self, action_path: Path, workspace: Path, temp: Path) -> None:
        self.action_path, self.workspace, self.temp = action_path, workspace, temp
        self.outputs: dict[str, str] = {}  # "steps.ID.outputs.NAME" -> value
        self.script_edits: dict[str, str] = {}
        self.log = ""  # what the last run's steps printed

    def run(
        self, inputs: Mapping[str, str], *, skip: tuple[str, ...] = ()
    ) -> tuple[int, list[dict[str, Any]]]:
        """The action's exit code, and the `uses` steps that would have run."""
        action = _action()
        # A new job: only the outputs of the steps it skips (ran before) carry over.
        self.outputs = {k: v for k, v in self.outputs.items() if k.split(".")[1] in skip}
        context = dict(self.outputs)
        context["github.action_path"] = str(self.action_path)
        for name, spec in action["inputs"].items():
            context[f"inputs.{name}"] = inputs.get(name, str(spec.get("default", "")))
        used: list[dict[str, Any]] = []
        self.log = ""
        for index, step in enumerate(action["runs"]["steps"]):
            # No `if:` is success(): this runner stops at the first failing step anyway.
            if step.get("id") in skip or ("if" in step and not _condition(step["if"], context)):
                continue
            if "uses" in step:
                with_ = {k: _expand(str(v), context) for k, v in step.get("with", {}).items()}
                used.append({"uses": step["uses"], "with": with_})
                continue
            code = self._script(index, step, context)
            if code != 0:
                return code, used
        return 0, used

    def _script(self, index: int, step: dict[str, Any], context: dict[str, str]) -> int:
        assert step["shell"] == "bash"
        assert "${{" not in step["run"], "inputs reach the script through env, never pasted in"
        script = step["run"]
        for old, new in self.script_edits.items():
            script = script.replace(old, new)
        file = self.temp / f"step-{index}.sh"
        file.write_text(script)
        output = self.temp / f"output-{index}"
        output.unlink(missing_ok=True)
        env = _clean_env(
            GITHUB_OUTPUT=str(output),
            GITHUB_ACTION_PATH=str(self.action_path),
            GITHUB_WORKSPACE=str(self.workspace),
            RUNNER_TEMP=str(self.temp),
            # The runner's python3 (3.11+, as actions/setup-python leaves it) is the test's.
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        )
        env.update({k: _expand(str(v), context) for k, v in step.get("env", {}).items()})
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(file)],
            cwd=self.workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
        self.log += result.stdout + result.stderr
        if step.get("id"):
            for name, value in _outputs(output).items():
                self.outputs[f"steps.{step['id']}.outputs.{name}"] = value
                context[f"steps.{step['id']}.outputs.{name}"] = value
        return result.returncode


def test_action_is_a_composite_action_with_documented_inputs() -> None:
    action = _action()
    assert action["runs"]["using"] == "composite"
    assert {"paths", "rules", "fail-on", "sarif-file", "upload"} <= set(action["inputs"])
    for name, spec in action["inputs"].items():
        assert len(spec.get("description", "")) > 20, name
    assert action["inputs"]["paths"]["required"] is True
    uses = [s["uses"] for s in action["runs"]["steps"] if "uses" in s]
    assert any(u.startswith("github/codeql-action/upload-sarif@") for u in uses)
    for name, spec in action["outputs"].items():
        assert spec.get("description") and spec.get("value"), name


def test_every_run_step_of_the_action_is_valid_bash(tmp_path: Path) -> None:
    for index, step in enumerate(_action()["runs"]["steps"]):
        if "run" not in step:
            continue
        assert step.get("shell") == "bash", step.get("name")  # composite steps must name one
        script = tmp_path / f"step-{index}.sh"
        script.write_text(step["run"])
        checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, f"{step.get('name')}: {checked.stderr}"


def _sarif_rules_and_files(text: str) -> tuple[set[str], set[str]]:
    doc = json.loads(text)
    assert doc["version"] == "2.1.0"
    rules, files = set(), set()
    for run in doc["runs"]:
        for result in run.get("results", []):
            rules.add(result["ruleId"])
            for location in result.get("locations", []):
                files.add(location["physicalLocation"]["artifactLocation"]["uri"])
    return rules, files


def _json_rules_and_files(text: str) -> tuple[set[str], set[str]]:
    doc = json.loads(text)
    rules = {f["rule"] for r in doc["results"] for f in r["findings"] if f["verdict"] == "deny"}
    files = {r["source"].partition("#")[0] for r in doc["results"] if not r["allowed"]}
    return rules, files


def test_action_steps_install_and_audit_a_manifest_folder(tmp_path: Path) -> None:
    """The action's steps, inputs substituted, on a sample workspace: install once from the
    action's checkout, then audit as a workflow would with a passing and a failing input."""
    runner = Runner(
        _checkout(tmp_path / "action"), tmp_path / "workspace", tmp_path / "runner-temp"
    )
    runner.temp.mkdir()
    write_files(
        runner.workspace,
        {
            "k8s/train.yaml": GOOD_POD,
            "k8s/notes.yaml": NOT_A_MANIFEST,
            "k8s/warned.yaml": WARNED_POD,
            "review/serve.yaml": DENIED_POD,
        },
    )
    sarif = "sarif" in FORMATS
    if not sarif:  # until `-o sarif` lands the same steps are checked with JSON output
        runner.script_edits["-o sarif"] = "-o json"
    read = _sarif_rules_and_files if sarif else _json_rules_and_files

    code, used = runner.run({"paths": "k8s", "sarif-file": "reports/audit.sarif"})
    assert code == 0, runner.log
    binary = Path(runner.outputs["steps.install.outputs.bin"])
    assert binary.is_file() and runner.temp in binary.parents  # its own venv, not the test's
    report = runner.workspace / "reports" / "audit.sarif"
    assert runner.outputs["steps.audit.outputs.sarif-file"] == "reports/audit.sarif"
    assert DENY_RULE not in read(report.read_text())[0]
    assert "nothing would be denied" in runner.log
    setup, upload = used
    assert setup["uses"].startswith("actions/setup-python@")
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert upload["with"]["sarif_file"] == "reports/audit.sarif"

    # A denied pod among the paths (new-line separated, as a YAML block scalar gives them):
    # the SARIF names rule and file, and the action fails after the upload.
    code, used = runner.run(
        {"paths": "k8s/train.yaml\nreview/serve.yaml\n", "upload": "false"}, skip=("install",)
    )
    assert code == 1, runner.log
    rules, files = read((runner.workspace / "gpu-admission.sarif").read_text())
    assert DENY_RULE in rules
    assert any(f.endswith("review/serve.yaml") for f in files), files
    assert "review/serve.yaml" in runner.log and DENY_RULE in runner.log  # the table, for people
    assert not any(u["uses"].startswith("github/codeql-action/") for u in used)  # upload: false

    code, _ = runner.run({"paths": "k8s", "fail-on": "warn"}, skip=("install",))
    assert code == 1, runner.log

    code, _ = runner.run({"paths": "k8s missing.yaml"}, skip=("install",))
    assert code == 2, runner.log
    assert "missing.yaml" in runner.log

    code, _ = runner.run({"paths": " \n"}, skip=("install",))
    assert code == 2, runner.log
    assert "names no file or folder" in runner.log


# --- shell completion --------------------------------------------------------------------------


def test_a_crash_exits_2_not_the_1_of_a_denial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hook and the action read exit 1 as "would be denied": a bug must not look like one."""
    from webhook import cli
    from webhook.audit import cli as audit_cli

    def crash(args: object) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(audit_cli, "run_audit", crash)
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    assert cli.main(["audit", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and "internal error" in err
