"""Test harness: the real server in a subprocess, and a client that talks to it as the apiserver.

The apiserver keeps connections alive, appends `?timeout=10s`, sends a fresh uid each time and
checks it comes back; `Webhook.review` does the same and fails the test if the uid is not echoed.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import jsonpatch
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"
SNAPSHOT = ROOT / "examples" / "cluster-snapshot.yaml"
K8S_VERSION = "1.33"

RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "PodTemplate": ("", "v1", "podtemplates"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
}


ALICE = "alice@example.com"  # who sends a review unless a test says otherwise


def review_for(
    obj: Any,
    *,
    kind: str | None = None,
    namespace: str = "ml-team",
    operation: str = "CREATE",
    old: Any = None,
    uid: str | None = None,
    dry_run: bool = False,
    subresource: str = "",
    user: str = ALICE,
) -> dict[str, Any]:
    """An AdmissionReview as the apiserver sends it for `obj` (a subresource such as
    `ephemeralcontainers` keeps the Pod's kind and names the subresource), sent by `user`."""
    kind = kind or obj["kind"]
    group, version, resource = RESOURCES.get(kind, ("example.com", "v1", kind.lower() + "s"))
    api_version = obj.get("apiVersion") if isinstance(obj, dict) else None
    if isinstance(api_version, str):  # the object's own apiVersion wins: batch.volcano.sh Job
        group, _, version = api_version.rpartition("/")
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": (obj.get("metadata") or {}).get("name", "") if isinstance(obj, dict) else "",
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        **({"subResource": subresource, "requestSubResource": subresource} if subresource else {}),
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "UpdateOptions" if operation == "UPDATE" else "CreateOptions",
        },
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@dataclass
class Answer:
    """One AdmissionReview response, decoded."""

    raw: dict[str, Any]

    @property
    def allowed(self) -> bool:
        return bool(self.raw["allowed"])

    @property
    def patch(self) -> list[dict[str, Any]]:
        if "patch" not in self.raw:
            return []
        assert self.raw["patchType"] == "JSONPatch"
        return list(jsonpatch.JsonPatch.from_string(base64.b64decode(self.raw["patch"]).decode()))

    @property
    def message(self) -> str:
        return str((self.raw.get("status") or {}).get("message", ""))

    @property
    def warnings(self) -> list[str]:
        return list(self.raw.get("warnings") or [])

    @property
    def denied_rules(self) -> set[str]:
        return {line.split(":", 1)[0] for line in self.message.splitlines() if line}

    @property
    def warned_rules(self) -> set[str]:
        return {w.split(":", 1)[0] for w in self.warnings}

    def apply(self, obj: Any) -> Any:
        return jsonpatch.apply_patch(obj, self.patch) if self.patch else obj


@dataclass
class Webhook:
    """A running server and a keep-alive HTTPS client bound to it."""

    url: str
    client: httpx.Client
    process: subprocess.Popen[bytes]

    def post(self, endpoint: str, body: bytes, **headers: str) -> httpx.Response:
        return self.client.post(
            f"{self.url}/{endpoint}",
            params={"timeout": "10s"},
            content=body,
            headers={"Content-Type": "application/json", **headers},
        )

    def review(self, endpoint: str, review: dict[str, Any]) -> Answer:
        import json

        resp = self.post(endpoint, json.dumps(review, separators=(",", ":")).encode())
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["apiVersion"] == "admission.k8s.io/v1"
        assert body["kind"] == "AdmissionReview"
        assert body["response"]["uid"] == review["request"]["uid"]
        return Answer(body["response"])

    def mutate(self, obj: Any, **kw: Any) -> Answer:
        return self.review("mutate", review_for(obj, **kw))

    def validate(self, obj: Any, **kw: Any) -> Answer:
        return self.review("validate", review_for(obj, **kw))

    def admit(self, obj: Any, **kw: Any) -> tuple[Any, Answer, Answer]:
        """What the apiserver does: mutate, apply the patch, validate the mutated object."""
        mutated_answer = self.mutate(obj, **kw)
        assert mutated_answer.allowed, mutated_answer.message
        mutated = mutated_answer.apply(obj)
        return mutated, mutated_answer, self.validate(mutated, **kw)

    def alive(self) -> bool:
        return self.process.poll() is None and self.client.get(f"{self.url}/healthz").is_success


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "certs",
            "generate",
            "--out",
            str(out),
            "--hosts",
            "localhost,127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return out


def start_webhook(
    certs: Path,
    rules: Path,
    log: Path,
    *extra: str,
    wait_ready: bool = True,
    client_cert: tuple[Path, Path] | None = None,
    ready_timeout: float = 20.0,
    probe_port: int | None = None,
) -> Webhook:
    """The server in a subprocess, its probes on the TLS port (or on `probe_port`, plain
    HTTP, as deployed), once it answers them."""
    port = _free_port()
    with log.open("wb") as fh:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "webhook",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--cert",
                str(certs / "tls.crt"),
                "--key",
                str(certs / "tls.key"),
                "--rules",
                str(rules),
                # Probes on the TLS port (one port per test server); a test may pass its own.
                "--probe-port",
                str(probe_port or 0),
                # No endpoint to be removed from here: stop at once (tests of the drain set it).
                "--drain-seconds",
                "0",
                *extra,
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    ctx = ssl.create_default_context(cafile=certs / "ca.crt")
    if client_cert is not None:  # as an apiserver configured with a client certificate
        ctx.load_cert_chain(*client_cert)
    client = httpx.Client(verify=ctx, timeout=10.0)
    url = f"https://127.0.0.1:{port}"
    probes = url if probe_port is None else f"http://127.0.0.1:{probe_port}"
    deadline = time.monotonic() + ready_timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"webhook exited early:\n{log.read_text()}")
        try:
            if client.get(f"{probes}/{'readyz' if wait_ready else 'healthz'}").is_success:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"webhook did not come up:\n{log.read_text()}")
        time.sleep(0.05)
    return Webhook(url=url, client=client, process=process)


def stop_webhook(hook: Webhook) -> None:
    hook.client.close()
    hook.process.terminate()
    try:
        hook.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        hook.process.kill()


@pytest.fixture(scope="session")
def webhook(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """The server with the shipped default rules, shared by most tests."""
    hook = start_webhook(certs, ROOT / "rules", tmp_path_factory.mktemp("log") / "server.log")
    yield hook
    stop_webhook(hook)


@pytest.fixture
def webhook_with(certs: Path, tmp_path: Path) -> Iterator[Any]:
    """Start a server: the default rules, `rule_settings` merged into `rules:`, `top` set on top."""
    started: list[Webhook] = []

    def start(rule_settings: dict[str, Any], *, args: tuple[str, ...] = (), **top: Any) -> Webhook:
        folder = tmp_path / f"rules{len(started)}"
        folder.mkdir()
        # The defaults are built in: a rule file names only what it changes.
        base: dict[str, Any] = {"rules": dict(rule_settings), **top}
        (folder / "rules.yaml").write_text(yaml.safe_dump(base))
        hook = start_webhook(certs, folder, tmp_path / f"server{len(started)}.log", *args)
        started.append(hook)
        return hook

    yield start
    for hook in started:
        stop_webhook(hook)


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every OpenAPI schema error of a built-in object (strict: unknown fields are errors)."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        # Where and which keyword, not the message: it quotes the instance, so the same
        # problem before and after a patch would read as two.
        where = ".".join(str(p) for p in exc.path)
        return [f"{where}: {exc.validator}"]
    return []


def pod_specs_as_pods(obj: dict[str, Any], table: Any = None) -> dict[str, dict[str, Any]]:
    """Each pod spec inside the object, wrapped as a Pod so the schema checks it as a PodSpec
    (`table`: a rule set's workload table, for kinds it declares)."""
    from webhook.engine.podviews import group_of, pod_views
    from webhook.engine.workloads import DEFAULT_TABLE
    from webhook.ruleset.models import RuleSet

    views = pod_views(
        obj,
        group=group_of(obj.get("apiVersion")),
        kind=obj["kind"],
        is_gpu=RuleSet().gpu_names().matches,
        table=table or DEFAULT_TABLE,
    )
    return {
        v.pointer: {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": v.spec}
        for v in views
    }


def schema_problems(obj: dict[str, Any], table: Any = None) -> list[str]:
    """Built-in kinds are checked whole; CRDs (no schema here) pod spec by pod spec."""
    from webhook.engine.podviews import BUILTIN_GROUPS, group_of

    if group_of(obj.get("apiVersion")) in BUILTIN_GROUPS:
        return schema_errors(obj)
    pods = pod_specs_as_pods(obj, table)
    return [f"{where}: {e}" for where, pod in pods.items() for e in schema_errors(pod)]


def assert_schema_valid(obj: dict[str, Any], table: Any = None) -> None:
    errors = schema_problems(obj, table)
    assert not errors, errors


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say it in one line when the corpus was not there: each of those skips stands for the
    hundreds of real manifests and AdmissionReviews the corpus tests run one by one."""
    skipped = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if "corpus" in str(getattr(r, "longrepr", "")) and "absent" in str(r.longrepr)
    ]
    if skipped:
        terminalreporter.write_line(
            f"NOTE: {len(skipped)} corpus tests did not run: {CORPUS} is absent. With ../shared "
            "beside this clone they check every real manifest and AdmissionReview in it "
            "(several hundred cases).",
            yellow=True,
            bold=True,
        )


# ---- a protocol-speaking API server for list/watch code (tests/fake_apiserver.py) ----------


@pytest.fixture
def server() -> Iterator[Any]:
    """An empty fake API server; a module that needs it seeded defines its own `server`."""
    from fake_apiserver import FakeApiServer

    srv = FakeApiServer()
    srv.start()
    yield srv
    srv.stop()


def live_cache(server: Any, **kwargs: Any) -> Any:
    """A LiveCache on the fake API server, with short watch timeouts and backoff."""
    from kubernetes import client

    from webhook.facts.live import LiveCache

    cfg = client.Configuration()
    cfg.host = server.url
    return LiveCache(client.ApiClient(cfg), watch_timeout=5, max_backoff=0.5, **kwargs)


def cluster_role_grants() -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> verbs the webhook's ClusterRole grants (manifests/base)."""
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "base" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    return {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def eventually(check: Any, seconds: float = 10) -> None:
    """Wait for `check()` to hold: what a watch delivers arrives a little later."""
    import time

    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[aiohttp.ClientSession]:
    """The routes of `webhook.server.app.make_app` on a real plain-HTTP listener on 127.0.0.1
    (what `serve` runs, minus TLS), and a keep-alive client for it: in-process tests of the
    handlers and what runs beside them."""
    from webhook.server.http.ports import start_servers

    servers = await start_servers(app, host="127.0.0.1", port=0, ssl_context=None)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{servers.port}") as client:
            yield client
    finally:
        await servers.stop()
