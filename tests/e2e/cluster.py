"""A real control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, started from the cached binaries of one pinned release.

Every process runs in its own process group and is told by the kernel to die with the test
process (PR_SET_PDEATHSIG), so a crash, a `kill -9` of pytest or a Ctrl-C leaves no etcd behind;
`stop()` kills them in reverse order and removes the temp folder. A component that does not come
up ends the run with the step that failed and its last log lines."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e import binaries
from tests.e2e import pki as pkimod

PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """Run in the child before exec: a new process group, and SIGKILL when the parent dies."""
    os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ComponentFailed(RuntimeError):
    pass


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        """The log's errors (klog's E and F lines) and its last lines: what a failed start
        says is seldom in its last few lines."""
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        errors = [line for line in text if line[:1] in ("E", "F") and line[1:5].isdigit()]
        return "\n".join([*errors[-10:], "...", *text[-lines:]])

    def stop(self, grace: float = 5.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)


@dataclass
class ControlPlane:
    """One release's control plane; `start()` brings it up, `stop()` leaves nothing behind."""

    release: binaries.Release
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu-e2e-")))
    processes: list[Process] = field(default_factory=list)
    etcd_port: int = 0
    apiserver_port: int = 0
    kwok_port: int = 0

    @property
    def bin(self) -> Path:
        return binaries.bin_dir(self.release)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    # --- lifecycle ----------------------------------------------------------------------------

    def spawn(self, name: str, args: list[str]) -> Process:
        log = self.root / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as fh:
            popen = subprocess.Popen(
                args,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                preexec_fn=_die_with_parent,
            )
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def wait_for(self, process: Process, step: str, check: Any, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ComponentFailed(
                    f"{process.name} exited ({process.popen.returncode}) during {step}; "
                    f"its last log lines:\n{process.tail()}"
                )
            try:
                if check():
                    return
            except Exception as exc:
                last = str(exc)
                if isinstance(exc, urllib.error.HTTPError):
                    exc.close()  # a refusal (`/readyz` 500 while starting) holds its socket
            time.sleep(0.2)
        raise ComponentFailed(
            f"{process.name}: {step} not reached in {timeout:.0f} s (last: {last}); "
            f"its last log lines:\n{process.tail()}"
        )

    def start(self) -> ControlPlane:
        # whatever ends the run (a test's tear-down cut short by Ctrl-C or SIGTERM included),
        # the interpreter's exit still stops what is left and removes the folder
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        pki = pkimod.make(self.root / "pki")
        self.pki = pki
        self.etcd_port, peer = free_port(), free_port()
        etcd = self.spawn(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--name=e2e",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self.wait_for(
            etcd,
            "etcd /health",
            lambda: self._http_json(f"{self.etcd_url}/health").get("health") == "true",
        )

        self.apiserver_port = free_port()
        args = [
            str(self.bin / "kube-apiserver"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={self.root / 'apiserver-certs'}",
            f"--tls-cert-file={pki.server_cert}",
            f"--tls-private-key-file={pki.server_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            # no `kubernetes` Service endpoints for a loopback address (1.37 refuses one): the
            # tests reach the apiserver directly, as envtest does
            "--endpoint-reconciler-type=none",
            # the apiserver compacts etcd itself every 5 minutes; the tests compact on purpose
            "--etcd-compaction-interval=0",
            "--profiling=false",
            "--v=1",
        ]
        if self.release.minor == "v1.34":
            # MutatingAdmissionPolicy is beta (off) in 1.34, GA from 1.36
            args += [
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
            ]
        self.apiserver_args = args
        apiserver = self.spawn("kube-apiserver", args)
        self._write_kubeconfig()
        self.wait_for(
            apiserver,
            "kube-apiserver /readyz",
            lambda: self.get_raw("/readyz") == b"ok",
            timeout=90,
        )

        cm_port = free_port()
        controller_manager = self.spawn(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={cm_port}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--use-service-account-credentials=false",
                # every controller but the ValidatingAdmissionPolicy status one: it type-checks
                # each exported policy (tens of kilobytes of CEL) against the schema of every
                # kind it matches, minutes of a core on two, and writes only
                # status.typeChecking, which no test reads (the apiserver itself still compiles
                # and enforces the policies)
                "--controllers=*,-validatingadmissionpolicy-status-controller",
                # quota status kept current quickly, as the tests read it
                "--resource-quota-sync-period=5s",
                "--v=1",
            ],
        )
        scheduler_port = free_port()
        scheduler = self.spawn(
            "kube-scheduler",
            [
                str(self.bin / "kube-scheduler"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                "--v=1",
            ],
        )
        self.kwok_port = free_port()
        kwok = self.spawn(
            "kwok",
            [
                str(self.bin / "kwok"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={self.bin / binaries.STAGES_FILE}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.0.0.1/24",
                "--node-ip=10.0.0.1",
                f"--server-address=127.0.0.1:{self.kwok_port}",
            ],
        )
        self.wait_for(
            controller_manager,
            "kube-controller-manager /healthz",
            lambda: self._https_ok(cm_port, "/healthz"),
        )
        self.wait_for(
            scheduler, "kube-scheduler /healthz", lambda: self._https_ok(scheduler_port, "/healthz")
        )
        self.wait_for(
            kwok,
            "kwok /healthz",
            lambda: self._http_ok(f"http://127.0.0.1:{self.kwok_port}/healthz"),
        )
        # the service-account controller runs: namespaces get their `default` account
        self.wait_for(
            controller_manager,
            "the default ServiceAccount",
            lambda: self.get_raw("/api/v1/namespaces/default/serviceaccounts/default"),
        )

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port and etcd, as an upgrade
        does: every watch is cut, and its watch cache starts anew from etcd's current state."""
        old = next(p for p in self.processes if p.name == "kube-apiserver")
        old.stop()
        self.processes.remove(old)
        apiserver = self.spawn("kube-apiserver", self.apiserver_args)
        self.wait_for(
            apiserver,
            "kube-apiserver /readyz after a restart",
            lambda: self.get_raw("/readyz") == b"ok",
            timeout=90,
        )

    def stop(self) -> None:
        try:
            for process in reversed(self.processes):
                process.stop()
            self.processes.clear()
        finally:  # even when interrupted half-way: what is left dies with us (pdeathsig)
            shutil.rmtree(self.root, ignore_errors=True)

    def alive(self) -> list[str]:
        return [p.name for p in self.processes if p.popen.poll() is not None]

    # --- clients ------------------------------------------------------------------------------

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(
            kubeconfig_text(
                self.url,
                self.pki.ca_cert,
                user={
                    "client-certificate": str(self.pki.admin_cert),
                    "client-key": str(self.pki.admin_key),
                },
            )
        )

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return ctx

    def get_raw(self, path: str) -> bytes:
        with urllib.request.urlopen(
            f"{self.url}{path}", context=self.ssl_context(), timeout=5
        ) as answer:
            return bytes(answer.read())

    def _https_ok(self, port: int, path: str) -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}{path}", context=ctx, timeout=5
        ) as answer:
            return bool(answer.status == 200)

    @staticmethod
    def _http_ok(url: str) -> bool:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)

    @staticmethod
    def _http_json(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
        with urllib.request.urlopen(request, timeout=5) as answer:
            return dict(json.loads(answer.read()))

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stderr}")
        return done

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (through its JSON gateway) and return it: every
        older resourceVersion is then gone, as after the apiserver's periodic compaction."""
        head = self._http_json(f"{self.etcd_url}/v3/kv/range", {"key": "AA=="})
        revision = int(head["header"]["revision"])
        self._http_json(
            f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True}
        )
        return revision


def kubeconfig_text(server: str, ca: Path, *, user: dict[str, str]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": "e2e", "user": user}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
            "current-context": "e2e",
        }
    )


def http_error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read().decode(errors="replace")
    except OSError:
        return str(exc)
