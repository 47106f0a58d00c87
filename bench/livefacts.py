"""The example cluster snapshot served as a live cluster: for benchmarks of the live cache.

`serve` in a real cluster reads its facts through list+watch (`webhook.facts.live`), not from
a snapshot file. To measure that configuration, this turns examples/cluster-snapshot.yaml into
the API objects a cluster would list (namespaces, nodes, quotas, priority classes, GPU pods,
DRA and KServe objects) and serves them from tests/support/fake_apiserver.py, which speaks the real
list/watch protocol, in a process of its own (so its work is not counted).
The snapshot's autoscaler sections are left out, and so are their kinds here (404: no CRD).

    python bench/livefacts.py --serve     # prints the port; serves until stdin closes
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = REPO / "examples" / "cluster-snapshot.yaml"
# `tests.support` from the repository, after PYTHONPATH: a compiled build given there is the
# `webhook` that runs.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

# Snapshot sections that hold whole objects, by the kind the fake API server serves them as.
_WHOLE = {
    "deviceclasses": "deviceClasses",
    "resourceclaimtemplates": "resourceClaimTemplates",
    "resourceclaims": "resourceClaims",
    "servingruntimes": "servingRuntimes",
    "clusterservingruntimes": "clusterServingRuntimes",
}
_AUTOSCALING = ("nodepools", "machinesets", "machinedeployments", "machinepools")


def _strings(values: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in values.items()}


def _nodes(entries: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for entry in entries:
        names = [f"{entry['name']}-{i}" for i in range(entry.get("count", 0))] or [entry["name"]]
        for name in names:
            yield {
                "metadata": {"name": name, "labels": _strings(entry.get("labels") or {})},
                "spec": {"taints": entry.get("taints") or []},
                "status": {"allocatable": _strings(entry.get("allocatable") or {})},
            }


def _pod(entry: dict[str, Any]) -> dict[str, Any]:
    gpus = _strings(entry.get("gpus") or {})
    return {
        "metadata": {"name": entry["name"], "namespace": entry["namespace"]},
        "spec": {
            "nodeName": entry.get("node", ""),
            "containers": [{"name": "main", "resources": {"requests": gpus, "limits": gpus}}],
        },
        "status": {"phase": entry.get("phase", "Running")},
    }


def snapshot_objects(path: Path = SNAPSHOT) -> dict[str, list[dict[str, Any]]]:
    """The snapshot's facts as the API objects a cluster would list, by kind."""
    snap = yaml.safe_load(path.read_text())
    objects: dict[str, list[dict[str, Any]]] = {
        "namespaces": [
            {"metadata": {"name": name, "labels": _strings((ns or {}).get("labels") or {})}}
            for name, ns in (snap.get("namespaces") or {}).items()
        ],
        "nodes": list(_nodes(snap.get("nodes") or [])),
        "resourcequotas": [
            {
                "metadata": {"name": q["name"], "namespace": q["namespace"]},
                "spec": {"hard": _strings(q.get("hard") or {})},
                "status": {
                    "hard": _strings(q.get("hard") or {}),
                    "used": _strings(q.get("used") or {}),
                },
            }
            for q in snap.get("resourceQuotas") or []
        ],
        "priorityclasses": [
            {
                "metadata": {"name": p["name"]},
                "value": p["value"],
                **({"preemptionPolicy": p["preemptionPolicy"]} if "preemptionPolicy" in p else {}),
                **({"globalDefault": p["globalDefault"]} if "globalDefault" in p else {}),
            }
            for p in snap.get("priorityClasses") or []
        ],
        "pods": [_pod(p) for p in snap.get("pods") or []],
        "configmaps": [],
    }
    for kind, section in _WHOLE.items():
        objects[kind] = list(snap.get(section) or [])
    return objects


def serve() -> None:
    """Child process: the fake API server holding the snapshot's objects, until stdin closes."""
    from tests.support.fake_apiserver import FakeApiServer

    server = FakeApiServer(bookmark_interval=5)
    server.missing = set(_AUTOSCALING)
    server.start()
    for kind, objects in snapshot_objects().items():
        server.load(kind, objects)
    print(server.port, flush=True)
    sys.stdin.read()


def start() -> tuple[subprocess.Popen[str], str]:
    """Start `serve` in a child process; its handle and the API server's URL."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    if not port:
        raise SystemExit("the fake API server did not start")
    return proc, f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        print(__doc__)
