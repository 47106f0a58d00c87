"""A small API server that speaks the real list/watch protocol, for the live cache's tests.

Not a mock of our code: it is the other side of the wire. It keeps a global resourceVersion,
serves paged lists (`limit`/`continue`, the list's resourceVersion), and watches that replay
events after the requested resourceVersion, send BOOKMARKs, end at `timeoutSeconds`, and
answer a compacted resourceVersion with an ERROR event carrying a 410 `Expired` Status, as
kube-apiserver does. Tests can drop open watches and take the server down and back up.
Custom resources (Karpenter, Cluster API) are served at their group's path like any kind;
`missing` makes a kind's CRD not installed (404 NotFound on every request, as for a group
the server does not serve) and `forbidden` refuses it (403 Forbidden, as RBAC does).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
import time
from collections import Counter
from typing import Any

import orjson
from aiohttp import web

PATHS = {
    "namespaces": "/api/v1/namespaces",
    "nodes": "/api/v1/nodes",
    "resourcequotas": "/api/v1/resourcequotas",
    "pods": "/api/v1/pods",
    "configmaps": "/api/v1/configmaps",
    "priorityclasses": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "deployments": "/apis/apps/v1/deployments",
    "statefulsets": "/apis/apps/v1/statefulsets",
    "daemonsets": "/apis/apps/v1/daemonsets",
    "replicasets": "/apis/apps/v1/replicasets",
    "jobs": "/apis/batch/v1/jobs",
    "cronjobs": "/apis/batch/v1/cronjobs",
    "nodepools": "/apis/karpenter.sh/v1/nodepools",
    "machinesets": "/apis/cluster.x-k8s.io/v1beta1/machinesets",
    "machinedeployments": "/apis/cluster.x-k8s.io/v1beta1/machinedeployments",
    "machinepools": "/apis/cluster.x-k8s.io/v1beta1/machinepools",
    # mpi-operator v2 serves MPIJob as v2beta1 only (the live audit tries v1 first)
    "mpijobs": "/apis/kubeflow.org/v2beta1/mpijobs",
    "deviceclasses": "/apis/resource.k8s.io/v1/deviceclasses",
    "resourceclaimtemplates": "/apis/resource.k8s.io/v1/resourceclaimtemplates",
    "resourceclaims": "/apis/resource.k8s.io/v1/resourceclaims",
    "resourceslices": "/apis/resource.k8s.io/v1/resourceslices",
    "servingruntimes": "/apis/serving.kserve.io/v1alpha1/servingruntimes",
    "clusterservingruntimes": "/apis/serving.kserve.io/v1alpha1/clusterservingruntimes",
    "validatingwebhookconfigurations": (
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    ),
    "localqueues": "/apis/kueue.x-k8s.io/v1beta2/localqueues",
    "clusterqueues": "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "resourceflavors": "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
    "queues": "/apis/scheduling.run.ai/v2/queues",
}
KIND_NAMES = {
    "namespaces": ("v1", "Namespace"),
    "nodes": ("v1", "Node"),
    "resourcequotas": ("v1", "ResourceQuota"),
    "pods": ("v1", "Pod"),
    "configmaps": ("v1", "ConfigMap"),
    "priorityclasses": ("scheduling.k8s.io/v1", "PriorityClass"),
    "deployments": ("apps/v1", "Deployment"),
    "statefulsets": ("apps/v1", "StatefulSet"),
    "daemonsets": ("apps/v1", "DaemonSet"),
    "replicasets": ("apps/v1", "ReplicaSet"),
    "jobs": ("batch/v1", "Job"),
    "cronjobs": ("batch/v1", "CronJob"),
    "nodepools": ("karpenter.sh/v1", "NodePool"),
    "machinesets": ("cluster.x-k8s.io/v1beta1", "MachineSet"),
    "machinedeployments": ("cluster.x-k8s.io/v1beta1", "MachineDeployment"),
    "machinepools": ("cluster.x-k8s.io/v1beta1", "MachinePool"),
    "mpijobs": ("kubeflow.org/v2beta1", "MPIJob"),
    "deviceclasses": ("resource.k8s.io/v1", "DeviceClass"),
    "resourceclaimtemplates": ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    "resourceclaims": ("resource.k8s.io/v1", "ResourceClaim"),
    "resourceslices": ("resource.k8s.io/v1", "ResourceSlice"),
    "servingruntimes": ("serving.kserve.io/v1alpha1", "ServingRuntime"),
    "clusterservingruntimes": ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"),
    "validatingwebhookconfigurations": (
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
    ),
    "localqueues": ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
    "clusterqueues": ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
    "resourceflavors": ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
    "queues": ("scheduling.run.ai/v2", "Queue"),
}
# Kinds that also answer on /namespaces/{namespace}/<plural> under their group's prefix.
NAMESPACED = {
    "pods", "resourcequotas", "configmaps", "deployments", "statefulsets", "daemonsets",
    "replicasets", "jobs", "cronjobs", "machinesets", "machinedeployments",
    "machinepools", "mpijobs",
    "resourceclaimtemplates", "resourceclaims", "servingruntimes", "localqueues",
}  # fmt: skip


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeApiServer:
    def __init__(self, *, bookmark_interval: float = 0.3) -> None:
        self.bookmark_interval = bookmark_interval
        self.rv = 100
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {k: {} for k in PATHS}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []
        self.compacted = 0  # watches from resourceVersions below this get 410
        self.down = False
        self.stopping = False  # set by stop(): open watches end at once
        self.missing: set[str] = set()  # kinds whose CRD is not installed: 404
        self.forbidden: set[str] = set()  # kinds the client may not read: 403
        self.lists: Counter[str] = Counter()  # list calls (first pages)
        self.pages: Counter[str] = Counter()  # every page served
        self.watches: list[tuple[str, str]] = []  # (kind, resourceVersion asked)
        self.gone: Counter[str] = Counter()  # 410 Expired events sent
        self._snapshot: list[dict[str, Any]] = []
        self._snapshot_key: tuple[str, str | None, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Condition | None = None
        self._streams: dict[web.StreamResponse, web.Request] = {}
        self._runner: web.AppRunner | None = None
        self._clients: list[Any] = []  # stopped before the server: see `stop`
        self.port = 0

    # ---- control, called from the test thread ----------------------------------------

    def _call(self, fn: Any, *args: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(fn(*args), self._loop).result(10)

    def put(self, kind: str, obj: dict[str, Any]) -> None:
        """Create or replace an object (ADDED or MODIFIED)."""
        self._call(self._put, kind, obj)

    def load(self, kind: str, objects: list[dict[str, Any]]) -> None:
        """Many objects at once, as if they had been created before anyone watched."""
        for obj in objects:
            self.rv += 1
            meta = obj.setdefault("metadata", {})
            meta["resourceVersion"] = str(self.rv)
            api_version, kind_name = KIND_NAMES[kind]
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind_name)
            self.objects[kind][(meta.get("namespace", ""), meta["name"])] = obj

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self._call(self._delete, kind, namespace, name)

    def compact(self) -> None:
        """Forget history: every watch from an older resourceVersion now gets 410 Gone."""
        self.compacted = self.rv + 1

    def drop_watches(self) -> None:
        """Cut every open watch connection mid-stream."""
        self._call(self._drop)

    def open_connections(self) -> int:
        """Client connections the server holds open now (kept alive between requests too)."""

        async def count() -> int:
            assert self._runner is not None and self._runner.server is not None
            return len(self._runner.server.connections)

        return int(self._call(count))

    def set_down(self, down: bool) -> None:
        self.down = down
        if down:
            self.drop_watches()

    # ---- the server -------------------------------------------------------------------

    async def _put(self, kind: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        key = (meta.get("namespace", ""), meta["name"])
        event = "MODIFIED" if key in self.objects[kind] else "ADDED"
        api_version, kind_name = KIND_NAMES[kind]
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind_name)
        self.objects[kind][key] = obj
        self.events.append((self.rv, kind, event, obj))
        await self._notify()

    async def _delete(self, kind: str, namespace: str, name: str) -> None:
        obj = self.objects[kind].pop((namespace, name))
        self.rv += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        self.events.append((self.rv, kind, "DELETED", obj))
        await self._notify()

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def _drop(self) -> None:
        for request in list(self._streams.values()):
            if request.transport is not None:
                request.transport.abort()
        self._streams.clear()

    def _handler(self, kind: str) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            if self.down:
                body = orjson.dumps(_status(503, "ServiceUnavailable", "etcd is down"))
                return web.Response(status=503, body=body, content_type="application/json")
            if kind in self.missing:
                self.lists[kind] += 1
                body = orjson.dumps(
                    _status(404, "NotFound", "the server could not find the requested resource")
                )
                return web.Response(status=404, body=body, content_type="application/json")
            if kind in self.forbidden:
                self.lists[kind] += 1
                group = request.path.split("/")[2] if request.path.startswith("/apis/") else ""
                message = (
                    f'{kind}.{group} is forbidden: User "test" cannot list resource "{kind}" '
                    f'in API group "{group}" at the cluster scope'
                )
                body = orjson.dumps(_status(403, "Forbidden", message))
                return web.Response(status=403, body=body, content_type="application/json")
            if request.query.get("watch") in ("true", "1"):
                return await self._watch(kind, request)
            return self._list(kind, request, request.match_info.get("namespace"))

        return handle

    # ---- writes, only for PolicyReports (what `audit --write-reports` stores) -----------

    async def _create(self, request: web.Request) -> web.Response:
        obj = await request.json()
        key = (request.match_info["namespace"], obj["metadata"]["name"])
        store = self.objects.setdefault("policyreports", {})
        if key in store:
            body = _status(409, "AlreadyExists", f"policyreports {key[1]!r} already exists")
            return web.Response(
                status=409, body=orjson.dumps(body), content_type="application/json"
            )
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        store[key] = obj
        return web.Response(status=201, body=orjson.dumps(obj), content_type="application/json")

    async def _get(self, request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        obj = self.objects.get("policyreports", {}).get(key)
        if obj is None:
            body = _status(404, "NotFound", "not found")
            return web.Response(
                status=404, body=orjson.dumps(body), content_type="application/json"
            )
        return web.Response(body=orjson.dumps(obj), content_type="application/json")

    async def _replace(self, request: web.Request) -> web.Response:
        obj = await request.json()
        key = (request.match_info["namespace"], request.match_info["name"])
        current = self.objects.get("policyreports", {}).get(key)
        if (
            current is None
            or obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]
        ):
            body = _status(409, "Conflict", "the object has been modified")
            return web.Response(
                status=409, body=orjson.dumps(body), content_type="application/json"
            )
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects["policyreports"][key] = obj
        return web.Response(body=orjson.dumps(obj), content_type="application/json")

    def _list(self, kind: str, request: web.Request, namespace: str | None) -> web.Response:
        self.pages[kind] += 1
        limit = int(request.query.get("limit", "0") or 0)
        token = request.query.get("continue")
        if not token:
            self.lists[kind] += 1
        if token:
            offset, rv = (int(x) for x in base64.b64decode(token).decode().split(":"))
        else:
            offset, rv = 0, self.rv
        # One sorted snapshot per list (keyed by its resourceVersion), so paging through 100k
        # objects does not sort them again for every page.
        cache_key = (kind, namespace, rv)
        if self._snapshot_key != cache_key:
            self._snapshot = sorted(
                (o for (ns, _), o in self.objects[kind].items() if namespace in (None, ns)),
                key=lambda o: o["metadata"]["name"],
            )
            self._snapshot_key = cache_key
        items = self._snapshot
        page = items[offset : offset + limit] if limit else items[offset:]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if limit and offset + limit < len(items):
            meta["continue"] = base64.b64encode(f"{offset + limit}:{rv}".encode()).decode()
        api_version, kind_name = KIND_NAMES[kind]
        body = {
            "apiVersion": api_version,
            "kind": f"{kind_name}List",
            "metadata": meta,
            "items": page,
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def _watch(self, kind: str, request: web.Request) -> web.StreamResponse:
        since = request.query.get("resourceVersion", "0")
        self.watches.append((kind, since))
        timeout = float(request.query.get("timeoutSeconds", "30"))
        bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1")
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        self._streams[resp] = request
        sent = int(since or 0)
        try:
            if sent < self.compacted:
                self.gone[kind] += 1
                status = _status(
                    410, "Expired", f"too old resource version: {sent} ({self.compacted})"
                )
                await resp.write(orjson.dumps({"type": "ERROR", "object": status}) + b"\n")
                return resp
            deadline = time.monotonic() + timeout
            last_bookmark = time.monotonic()
            assert self._changed is not None
            while time.monotonic() < deadline and not self.down and not self.stopping:
                for rv, k, event, obj in list(self.events):
                    if k == kind and rv > sent:
                        await resp.write(orjson.dumps({"type": event, "object": obj}) + b"\n")
                        sent = rv
                if bookmarks and time.monotonic() - last_bookmark >= self.bookmark_interval:
                    api_version, kind_name = KIND_NAMES[kind]
                    mark = {
                        "kind": kind_name,
                        "apiVersion": api_version,
                        "metadata": {"resourceVersion": str(self.rv)},
                    }
                    await resp.write(orjson.dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
                    sent = max(sent, self.rv)
                    last_bookmark = time.monotonic()
                async with self._changed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), self.bookmark_interval)
            await resp.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass
        finally:
            self._streams.pop(resp, None)
        return resp

    def start(self) -> None:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                self._changed = asyncio.Condition()
                app = web.Application()
                reports = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/{namespace}/policyreports"
                app.router.add_post(reports, self._create)
                app.router.add_get(reports + "/{name}", self._get)
                app.router.add_put(reports + "/{name}", self._replace)
                for kind, path in PATHS.items():
                    app.router.add_get(path, self._handler(kind))
                    if kind in NAMESPACED:
                        prefix, plural = path.rsplit("/", 1)
                        app.router.add_get(
                            f"{prefix}/namespaces/{{namespace}}/{plural}", self._handler(kind)
                        )
                self._runner = web.AppRunner(app, handle_signals=False)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
                ready.set()

            loop.run_until_complete(boot())
            try:
                loop.run_forever()
            finally:  # stopped: nothing of the server outlives it
                _close_loop(loop)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10)

    def serves(self, client: Any) -> Any:
        """`client` (anything with `stop()`, such as a LiveCache) is stopped when the server
        is: a test that lists once and never starts the watches leaves no pooled socket."""
        self._clients.append(client)
        return client

    def stop(self) -> None:
        assert self._loop is not None and self._runner is not None
        for client in self._clients:  # their watches end before the server goes
            client.stop()

        async def shutdown() -> None:
            self.stopping = True
            assert self._changed is not None
            async with self._changed:
                self._changed.notify_all()
            await self._drop()
            assert self._runner is not None
            await self._runner.cleanup()

        self._call(shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        assert not self._thread.is_alive(), "the fake API server's loop did not stop"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self) -> str:
        return kubeconfig_for(self.url)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What `asyncio.run` does when its coroutine ends: cancel what still runs on `loop`, let
    it finish, then close the loop (an unclosed one is a ResourceWarning at collection)."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


def kubeconfig_for(url: str) -> str:
    """A kubeconfig that points the kubernetes client at `url` (plain HTTP, a dummy token)."""
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters:\n- name: fake\n  cluster: {{server: '{url}'}}\n"
        "users:\n- name: fake\n  user: {token: test}\n"
        "contexts:\n- name: fake\n  context: {cluster: fake, user: fake}\n"
    )
