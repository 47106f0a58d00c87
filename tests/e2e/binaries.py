"""The real control plane's binaries, built from pinned Go modules and cached outside the repo.

Each Kubernetes version the end-to-end suite runs on has a small Go module under
`tests/e2e/go/` that requires `k8s.io/kubernetes` at that version and names the upstream
commands as its tools; etcd (the release that version's kubeadm pairs with it) and kwok have
modules of their own so their dependency graphs never move the Kubernetes one. The modules'
go.mod and go.sum are committed; the binaries land in
`~/.cache/gpu-admission/controlplane/<version>/` with a stamp of what built them, and the Go
module and build caches sit at stable paths beside them, so a second build is a no-op.

    python tests/e2e/binaries.py gomod v1.34.4   # (re)write that version's go.mod from its own
    python tests/e2e/binaries.py build            # build every pinned version (no-op when warm)
    python tests/e2e/binaries.py paths v1.34.4    # print where the binaries are
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODULES = HERE / "go"


@dataclass(frozen=True)
class Release:
    """One Kubernetes version the suite runs on, with the etcd its kubeadm pairs with it."""

    kubernetes: str
    etcd: str

    @property
    def minor(self) -> str:
        return ".".join(self.kubernetes.split(".")[:2])

    @property
    def kubernetes_module(self) -> Path:
        return MODULES / f"kubernetes-{self.minor}"

    @property
    def etcd_module(self) -> Path:
        return MODULES / f"etcd-{'.'.join(self.etcd.split('.')[:2])}"


# The oldest and the newest Kubernetes the Go module proxy serves and the build supports. The
# etcd of each is kubeadm's pairing for that minor (cmd/kubeadm/app/constants, SupportedEtcdVersion;
# 1.37's kubeadm names none past 1.36, whose pairing it keeps).
RELEASES: tuple[Release, ...] = (
    Release("v1.34.4", "v3.6.5"),
    Release("v1.37.2", "v3.7.0"),
)
KWOK_MODULE = MODULES / "kwok"
KWOK_VERSION = "v0.8.0"

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ALL_COMMANDS = (*KUBE_COMMANDS, "etcd", "kwok")
# kwok runs no fake node or pod without Stages: the ones its module ships (kwokctl's defaults:
# nodes made Ready and kept so, pods bound to them run, complete and are deleted), copied from
# the module cache next to the binaries as one file.
KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/general/pod-create.yaml",
    "pod/general/pod-init-container-running.yaml",
    "pod/general/pod-init-container-completed.yaml",
    "pod/general/pod-ready.yaml",
    "pod/general/pod-complete.yaml",
    "pod/general/pod-delete.yaml",
)
STAGES_FILE = "kwok-stages.yaml"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-admission"


def bin_dir(release: Release) -> Path:
    return cache_root() / "controlplane" / release.kubernetes


def go_env() -> dict[str, str]:
    """The go command's environment: caches at stable paths, modules read-write (a cache can be
    removed with rm), no VCS stamping (the wrapper modules sit in a repo the build ignores)."""
    root = cache_root() / "go"
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(root / "mod"),
        GOCACHE=str(root / "build"),
        GOFLAGS="-modcacherw -buildvcs=false -mod=mod",
        CGO_ENABLED="0",
        GOTOOLCHAIN="local",
    )
    return env


def find_go() -> str | None:
    return shutil.which("go")


def run_go(args: list[str], cwd: Path) -> str:
    go = find_go()
    if go is None:
        raise SystemExit("go is not on PATH: install Go to build the control plane")
    done = subprocess.run(
        [go, *args], cwd=cwd, env=go_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(
            f"`go {' '.join(args)}` in {cwd} failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )
    return done.stdout


# --- go.mod generation ----------------------------------------------------------------------


def upstream_gomod(module: str, version: str) -> str:
    """The go.mod a module published at a version, as the module proxy serves it."""
    out = run_go(["mod", "download", "-json", f"{module}@{version}"], cwd=HERE)
    return Path(json.loads(out)["GoMod"]).read_text()


STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/\S+\s*$", re.M)


def staging_modules(gomod: str) -> list[str]:
    """The staging modules a k8s.io/kubernetes go.mod replaces with its own folders: these have
    no usable version in its require block, so a module that requires it must replace each with
    the published v0.Y.Z."""
    return sorted(set(STAGING_REPLACE.findall(gomod)))


def directive(gomod: str, name: str) -> str | None:
    found = re.search(rf"^{name}\s+(\S+)\s*$", gomod, re.M)
    return found.group(1) if found else None


def kubernetes_gomod(release: Release) -> str:
    upstream = upstream_gomod("k8s.io/kubernetes", release.kubernetes)
    staging = staging_modules(upstream)
    if not staging:
        raise SystemExit(f"k8s.io/kubernetes {release.kubernetes}: no staging replaces found")
    staging_version = "v0." + release.kubernetes.removeprefix("v1.")
    lines = [
        "// Generated by tests/e2e/binaries.py from k8s.io/kubernetes's own go.mod: do not edit.",
        f"// The upstream commands of Kubernetes {release.kubernetes} for the end-to-end suite.",
        "module gpu-admission.test/controlplane/kubernetes",
        "",
        f"go {directive(upstream, 'go')}",
        "",
    ]
    godebug = directive(upstream, "godebug")
    if godebug:
        lines += [f"godebug {godebug}", ""]
    lines += [f"require k8s.io/kubernetes {release.kubernetes}", "", "replace ("]
    lines += [f"\t{name} => {name} {staging_version}" for name in staging]
    lines += [")", "", "tool ("]
    lines += [f"\tk8s.io/kubernetes/cmd/{command}" for command in KUBE_COMMANDS]
    lines += [")", ""]
    return "\n".join(lines)


def etcd_gomod(release: Release) -> str:
    upstream = upstream_gomod("go.etcd.io/etcd/server/v3", release.etcd)
    return "\n".join(
        [
            "// Generated by tests/e2e/binaries.py: do not edit.",
            f"// etcd {release.etcd}, the release kubeadm pairs with Kubernetes {release.minor}.",
            "module gpu-admission.test/controlplane/etcd",
            "",
            f"go {directive(upstream, 'go')}",
            "",
            f"require go.etcd.io/etcd/server/v3 {release.etcd}",
            "",
            "tool go.etcd.io/etcd/server/v3",
            "",
        ]
    )


def kwok_gomod() -> str:
    upstream = upstream_gomod("sigs.k8s.io/kwok", KWOK_VERSION)
    replaces = re.findall(r"^replace\s+(.+)$", upstream, re.M)
    block = re.search(r"^replace \((.*?)^\)", upstream, re.M | re.S)
    if replaces or block:
        raise SystemExit("sigs.k8s.io/kwok's go.mod has replace directives: carry them over")
    return "\n".join(
        [
            "// Generated by tests/e2e/binaries.py: do not edit.",
            "// kwok, the fake nodes (GPU capacity, labels, taints) the scheduler binds to.",
            "module gpu-admission.test/controlplane/kwok",
            "",
            f"go {directive(upstream, 'go')}",
            "",
            f"require sigs.k8s.io/kwok {KWOK_VERSION}",
            "",
            "tool sigs.k8s.io/kwok/cmd/kwok",
            "",
        ]
    )


def write_module(folder: Path, gomod: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "go.mod").write_text(gomod)
    run_go(["mod", "tidy"], cwd=folder)


def regenerate(release: Release) -> None:
    write_module(release.kubernetes_module, kubernetes_gomod(release))
    write_module(release.etcd_module, etcd_gomod(release))


# --- building -------------------------------------------------------------------------------


def ldflags(release: Release) -> str:
    """Version stamps as Kubernetes' own build writes them (hack/lib/version.sh), so `/version`
    and `kubectl version` say the release."""
    major, minor = release.kubernetes.removeprefix("v").split(".")[:2]
    values = {
        "gitVersion": release.kubernetes,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = [
        f"-X k8s.io/{package}.{key}={value}"
        for package in ("client-go/pkg/version", "component-base/version")
        for key, value in values.items()
    ]
    return " ".join(["-s", "-w", *flags])


def fingerprint(release: Release) -> str:
    digest = hashlib.sha256()
    for folder in (release.kubernetes_module, release.etcd_module, KWOK_MODULE):
        for name in ("go.mod", "go.sum"):
            digest.update((folder / name).read_bytes())
    digest.update(ldflags(release).encode())
    digest.update(
        subprocess.run(
            [find_go() or "go", "version"], capture_output=True, text=True, check=False
        ).stdout.encode()
    )
    return digest.hexdigest()


def is_built(release: Release) -> bool:
    folder = bin_dir(release)
    stamp = folder / ".stamp"
    return (
        stamp.is_file()
        and stamp.read_text().strip() == fingerprint(release)
        and all((folder / name).is_file() for name in (*ALL_COMMANDS, STAGES_FILE))
    )


def build(release: Release, *, log: bool = True) -> Path:
    folder = bin_dir(release)
    if is_built(release):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".stamp").unlink(missing_ok=True)
    started = time.monotonic()
    steps = [
        (
            release.kubernetes_module,
            [
                "-ldflags",
                ldflags(release),
                "-o",
                str(folder),
                *(f"k8s.io/kubernetes/cmd/{c}" for c in KUBE_COMMANDS),
            ],
        ),
        (
            release.etcd_module,
            ["-ldflags", "-s -w", "-o", str(folder / "etcd"), "go.etcd.io/etcd/server/v3"],
        ),
        (
            KWOK_MODULE,
            ["-ldflags", "-s -w", "-o", str(folder / "kwok"), "sigs.k8s.io/kwok/cmd/kwok"],
        ),
    ]
    for module, args in steps:
        if log:
            print(
                f"controlplane {release.kubernetes}: building in {module.relative_to(HERE)}",
                file=sys.stderr,
                flush=True,
            )
        run_go(["build", "-trimpath", *args], cwd=module)
    module_dir = Path(go_env()["GOMODCACHE"]) / f"sigs.k8s.io/kwok@{KWOK_VERSION}"
    stages = [(module_dir / "kustomize" / "stage" / name).read_text() for name in KWOK_STAGES]
    (folder / STAGES_FILE).write_text("\n---\n".join(stages))
    (folder / ".stamp").write_text(fingerprint(release) + "\n")
    if log:
        print(
            f"controlplane {release.kubernetes}: built in {time.monotonic() - started:.0f} s"
            f" into {folder}",
            file=sys.stderr,
            flush=True,
        )
    return folder


def release_named(version: str) -> Release:
    for release in RELEASES:
        if version in (release.kubernetes, release.minor):
            return release
    raise SystemExit(f"no pinned release {version}: {[r.kubernetes for r in RELEASES]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gomod = sub.add_parser("gomod", help="rewrite the wrapper modules' go.mod and go.sum")
    gomod.add_argument("version", nargs="*")
    gomod.add_argument("--kwok", action="store_true", help="the kwok module too")
    building = sub.add_parser("build", help="build the binaries (a no-op when warm)")
    building.add_argument("version", nargs="*")
    paths = sub.add_parser("paths", help="print a release's binary folder")
    paths.add_argument("version")
    sub.add_parser("versions", help="print the pinned releases")
    args = parser.parse_args(argv)
    if args.command == "versions":
        print(" ".join(release.kubernetes for release in RELEASES))
        return 0
    if args.command == "paths":
        print(bin_dir(release_named(args.version)))
        return 0
    chosen = [release_named(v) for v in args.version] or list(RELEASES)
    if args.command == "gomod":
        if args.kwok:
            write_module(KWOK_MODULE, kwok_gomod())
        for release in chosen:
            regenerate(release)
        return 0
    for release in chosen:
        build(release)
    return 0


if __name__ == "__main__":
    sys.exit(main())
