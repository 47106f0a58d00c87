"""The Dockerfile stays in step with pyproject.toml and with the Deployment that runs the image.

Read statically (no Docker daemon needed), plus the image's install step replayed in a
temporary venv: the files the build stage copies, the same `pip install`, then the console
script run against the repository's rules.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import venv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from tests.support.paths import ROOT
from webhook.cli import build_parser

DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PINNED_PYTHON = re.compile(
    r"^python:(?P<version>\d+\.\d+\.\d+)-slim-bookworm(@sha256:[0-9a-f]{64})?$"
)
# Dependencies, then the project with its engine compiled by mypyc (~45 s of gcc).
INSTALL_BUDGET_SECONDS = 240
# pip's words for "no network", as opposed to a dependency that does not resolve.
OFFLINE = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def every(self, instruction: str) -> list[str]:
        return [args for name, args in self.instructions if name == instruction]

    def last(self, instruction: str) -> str:
        found = self.every(instruction)
        assert found, f"stage {self.name or self.base} has no {instruction}"
        return found[-1]


def parse(text: str) -> list[Stage]:
    """The Dockerfile's stages with their instructions (continuations joined, comments out)."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            parts = args.split()
            parts = [p for p in parts if not p.startswith("--platform")]
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        else:
            assert stages, f"{instruction} before any FROM"
            stages[-1].instructions.append((instruction, args.strip()))
    return stages


STAGES = parse(DOCKERFILE.read_text())
FINAL = STAGES[-1]


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def _build_stage() -> Stage:
    """The stage that runs `pip install` (the final stage itself when there is only one)."""
    (stage,) = [s for s in STAGES if any("pip install" in run for run in s.every("RUN"))]
    return stage


def _deployment_container() -> dict[str, Any]:
    deployment = yaml.safe_load((ROOT / "manifests" / "base" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name or "final")
def test_every_stage_starts_from_python_slim_pinned_to_a_patch_release(stage: Stage) -> None:
    assert PINNED_PYTHON.match(stage.base), stage.base


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name or "final")
def test_the_base_images_python_satisfies_requires_python(stage: Stage) -> None:
    match = PINNED_PYTHON.match(stage.base)
    assert match is not None
    requires = SpecifierSet(PYPROJECT["project"]["requires-python"])
    assert requires.contains(match["version"]), f"{stage.base} vs requires-python {requires}"


def test_the_runtime_stage_has_the_python_the_venv_was_built_with() -> None:
    # /opt/venv/bin/python is a symlink to the base image's interpreter: both must be the same.
    assert {s.base for s in STAGES} == {FINAL.base}


def test_the_image_installs_the_project_from_pyproject() -> None:
    stage = _build_stage()
    copied = {
        src for args in stage.every("COPY") if "--from" not in args for src in args.split()[:-1]
    }
    assert "pyproject.toml" in copied
    assert "setup.py" in copied  # it compiles the engine (GPU_ADMISSION_COMPILE)
    assert PYPROJECT["project"]["readme"] in copied  # setuptools reads it while building
    for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert package in copied, f"the package {package}/ is not copied into the build"
    locked, project = _pip_installs(stage)
    # First every dependency, pinned and hash-checked; then the project with none of its own.
    assert "--require-hashes" in locked and locked[locked.index("-r") + 1] == "requirements.lock"
    assert "requirements.lock" in copied
    assert "." in project and "--no-deps" in project
    assert "--no-build-isolation" in project  # built with the locked setuptools, nothing else


def test_the_image_runs_as_a_numeric_non_root_user_the_deployment_agrees_with() -> None:
    user = FINAL.last("USER")
    uid = user.split(":")[0]
    # Numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd.
    assert uid.isdigit() and int(uid) != 0, user
    pod = yaml.safe_load((ROOT / "manifests" / "base" / "deployment.yaml").read_text())
    assert pod["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_the_entrypoint_is_the_console_script_in_exec_form() -> None:
    # Exec form: the server is PID 1 and gets SIGTERM itself, so it can drain in-flight reviews.
    assert _exec_form(FINAL.last("ENTRYPOINT")) == ["gpu-admission"]
    assert "gpu-admission" in PYPROJECT["project"]["scripts"]


def test_the_default_command_serves_with_the_paths_the_deployment_mounts() -> None:
    parser = build_parser()
    image = parser.parse_args(_exec_form(FINAL.last("CMD")))
    cluster = parser.parse_args(_deployment_container()["args"])
    assert image.command == cluster.command == "serve"
    for option in ("host", "port", "cert", "key", "rules"):
        assert getattr(image, option) == getattr(cluster, option), option


def test_the_image_ships_the_default_rules_where_its_default_command_reads_them() -> None:
    rules_dir = build_parser().parse_args(_exec_form(FINAL.last("CMD"))).rules
    copies = [args.split() for args in FINAL.every("COPY") if "--from" not in args]
    assert ["rules", rules_dir] in copies


def test_the_exposed_ports_are_the_ones_the_deployment_declares() -> None:
    exposed = {int(p.split("/")[0]) for args in FINAL.every("EXPOSE") for p in args.split()}
    ports = {p["containerPort"] for p in _deployment_container()["ports"]}
    assert exposed == ports == {8443, 8081}  # the webhook (TLS), the probes and /metrics


def test_there_is_no_healthcheck_kubernetes_probes_the_server_instead() -> None:
    assert not any(stage.every("HEALTHCHECK") for stage in STAGES)


def _pip_installs(stage: Stage) -> list[list[str]]:
    """The arguments after each `pip install` in the stage's RUNs, in order."""
    found = []
    for run in stage.every("RUN"):
        for command in run.split("&&"):
            words = shlex.split(command)
            for i in range(len(words) - 1):
                if words[i].endswith("pip") and words[i + 1] == "install":
                    found.append(words[i + 2 :])
    assert found, "no `pip install` in the build stage"
    return found


# Its own budget for pip, above the suite's per-test limit.
@pytest.mark.timeout(INSTALL_BUDGET_SECONDS + 60)
def test_the_install_step_gives_a_working_console_script(tmp_path: Path) -> None:
    """The build stage's COPY and `pip install`, replayed into a fresh venv (about 10 s)."""
    stage = _build_stage()
    workdir = Path(stage.last("WORKDIR"))
    context = tmp_path / "context"
    base = context / workdir.relative_to("/")
    for args in stage.every("COPY"):
        assert "--from" not in args
        *sources, dest = args.split()
        target = context / dest.lstrip("/") if dest.startswith("/") else base / dest
        for source in sources:  # Docker's rules: a folder's contents go into dest
            src = ROOT / source
            if src.is_dir():
                ignore = shutil.ignore_patterns("__pycache__")
                shutil.copytree(src, target, dirs_exist_ok=True, ignore=ignore)
            elif dest.endswith("/") or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target / src.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)  # this test's pip installs into it (--python)
    env = {**os.environ, **_env(stage)}
    env.pop("PYTHONPATH", None)  # the compiled run of the suite sets it: not the image's
    pip = [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python")]
    for install in _pip_installs(stage):
        # --no-cache-dir keeps the image small; here the cache only saves downloads.
        args = [a for a in install if a != "--no-cache-dir"]  # type: ignore[assignment]
        try:
            result = subprocess.run(
                [*pip, "install", "--quiet", "--disable-pip-version-check", *args],
                cwd=base,
                capture_output=True,
                text=True,
                timeout=INSTALL_BUDGET_SECONDS,
                env=env,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"pip install took over {INSTALL_BUDGET_SECONDS} s here; not replayed")
        if result.returncode != 0 and any(s in result.stderr for s in OFFLINE):
            pytest.skip("PyPI is not reachable from here; the install step was not replayed")
        assert result.returncode == 0, result.stderr[-3000:]

    checked = subprocess.run(
        [str(env_dir / "bin" / "gpu-admission"), "rules", "check", str(ROOT / "rules")],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The image runs the compiled engine: the build stage asks for it and has a compiler.
    assert env.get("GPU_ADMISSION_COMPILE") == "1"
    built = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", ENGINE_BUILD],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,  # not the repository, whose sources would be imported instead
        env=env,
    )
    assert built.stdout.strip() == "mypyc", built.stdout + built.stderr


ENGINE_BUILD = "from webhook.engine.build import engine_build; print(engine_build())"


def _env(stage: Stage) -> dict[str, str]:
    """The stage's ENV instructions (the `KEY=value ...` form), as the later RUNs see them."""
    found: dict[str, str] = {}
    for args in stage.every("ENV"):
        for word in shlex.split(args):
            key, sep, value = word.partition("=")
            assert sep, f"ENV {args}: use the KEY=value form"
            found[key] = value
    return found
