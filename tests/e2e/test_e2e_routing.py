"""Routing through the apiserver's own CEL: plain pods never reach the webhook, a privileged
pod asking for no GPU does (and is refused once a GPU node without a GPU taint exists), only
the sharing scheduler's binder writes a device list into a pod's ConfigMap, and
objects of every registered kind with nulls, odd types and missing values at their pod-spec
paths never make a matchCondition fail (each create is answered for schema reasons or by the
webhook, none with a CEL error, and the apiserver counts no match-condition evaluation
error)."""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.support import Installed, concurrently, eventually, gpu_pod, kubectl_error
from webhook.engine.workloads import DEFAULT_TABLE, Workload
from webhook.ruleset.workloads import LIST_ITEMS, MAP_VALUES

OBJECTS = 1200
SEED = 1128
CLIENTS = 4  # the generated objects' creates in flight at once


def test_plain_pods_never_reach_the_webhook(installed: Installed, namespace: str) -> None:
    counted = "gpu_admission_requests_total"
    before = installed.metric(counted)
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"plain-{i}"},
            "spec": {
                "containers": [
                    {"name": "web", "image": "nginx", "resources": {"limits": {"memory": "1Gi"}}}
                ],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
            },
        }
        for i in range(20)
    ]
    # one kubectl, twenty creates through the apiserver
    made = installed.plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(pods)
    ).stdout
    assert made.count("created") == 20, made
    assert installed.metric(counted) == before
    # the counter is the right one: a GPU pod moves it, by its /mutate and /validate calls
    installed.plane.kubectl(
        "create",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=json.dumps(gpu_pod("counted")),
    )
    assert installed.metric(counted) >= before + 2


def privileged_daemonset(name: str) -> dict[str, Any]:
    """A node agent installed into a tenant namespace: privileged, no GPU, no GPU toleration."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "agent",
                            "image": "busybox:1.36",
                            "command": ["sleep", "infinity"],
                            "securityContext": {"privileged": True},
                        }
                    ]
                },
            },
        },
    }


@pytest.fixture
def untainted_gpu_node(installed: Installed) -> Iterator[str]:
    """A kwok AMD GPU node with no taint at all, as many AMD and on-prem clusters run them."""
    plane = installed.plane
    name = "untainted-mi300-0"
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "amd.com/gpu": "8"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
        },
        "spec": {},
        "status": {"allocatable": resources, "capacity": resources},
    }
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(node))
    yield name
    plane.kubectl("delete", "node", name, "--wait=false", check=False)


def test_a_privileged_daemonset_is_sent_and_admitted_where_gpu_nodes_are_tainted(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    counted = "gpu_admission_requests_total"
    before = installed.metric(counted)
    # Every GPU node tainted (none here at all): sent for its privileged container, admitted.
    plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(privileged_daemonset("before"))
    )
    assert installed.metric(counted) >= before + 2, "the privileged DaemonSet was not sent"


def test_a_privileged_daemonset_asking_no_gpu_is_refused_on_untainted_gpu_nodes(
    installed: Installed, namespace: str, untainted_gpu_node: str
) -> None:
    plane = installed.plane
    body = json.dumps(privileged_daemonset("node-tuner"))

    def refused() -> str:
        done = plane.kubectl("create", "-n", namespace, "-f", "-", stdin=body, check=False)
        if done.returncode == 0:
            plane.kubectl("delete", "daemonset", "node-tuner", "-n", namespace, "--wait=false")
            return ""
        return kubectl_error(done)

    # the live cache shows the node within a watch event or two
    error = eventually(refused, what=f"{untainted_gpu_node} in the webhook's facts")
    assert "admission webhook" in error and "privileged-gpu" in error, error
    assert "spec.template.spec.containers[0].securityContext.privileged" in error, error


def config_map(name: str, data: dict[str, str]) -> str:
    return json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    )


def test_only_the_sharing_scheduler_s_binder_writes_a_device_list_into_a_pod_s_config_map(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    counted = "gpu_admission_requests_total"
    # An application's ConfigMap with the variable: not a sharing scheduler's, never sent.
    before = installed.metric(counted)
    plane.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=config_map("train-env", {"NVIDIA_VISIBLE_DEVICES": "void"}),
    )
    assert installed.metric(counted) == before
    # The name KAI gives a pod's ConfigMap, written by a tenant: sent and refused.
    shared = config_map("notebook-x7k2p9q-shared-gpu-0", {"NVIDIA_VISIBLE_DEVICES": "all"})
    done = plane.kubectl("create", "-n", namespace, "-f", "-", stdin=shared, check=False)
    error = kubectl_error(done)
    assert done.returncode != 0 and "configmaps.gpu-admission.io" in error, error
    assert "NVIDIA_VISIBLE_DEVICES='all'" in error and "configMapWriters" in error, error
    # KAI's binder (its chart's ServiceAccount) may: not even sent.
    before = installed.metric(counted)
    plane.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        "--as=system:serviceaccount:kai-scheduler:binder",
        "--as-group=system:masters",
        stdin=shared,
    )
    assert installed.metric(counted) == before
    # Once it is there, the tenant's rewrite of the device list is refused too.
    done = plane.kubectl(
        "patch",
        "configmap",
        "notebook-x7k2p9q-shared-gpu-0",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"data": {"NVIDIA_VISIBLE_DEVICES": "0,1,2,3"}}),
        check=False,
    )
    assert done.returncode != 0 and "configmaps.gpu-admission.io" in kubectl_error(done)


def crds() -> list[dict[str, Any]]:
    """A schemaless CRD for every custom kind of the workload table, so the apiserver stores
    whatever the generated objects hold and hands it to the matchConditions as it is."""
    out = []
    for w in DEFAULT_TABLE.kinds:
        d = w.declared
        if d.group in ("", "apps", "batch"):
            continue
        out.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{d.resource}.{d.group}"},
                "spec": {
                    "group": d.group,
                    "scope": d.scope,
                    "names": {
                        "plural": d.resource,
                        "kind": d.kind,
                        "singular": d.kind.lower(),
                        "listKind": f"{d.kind}List",
                    },
                    "versions": [
                        {
                            "name": v,
                            "served": True,
                            "storage": i == 0,
                            "schema": {
                                "openAPIV3Schema": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                        for i, v in enumerate(d.versions)
                    ],
                },
            }
        )
    return out


def odd(rng: random.Random, depth: int = 0) -> Any:
    """A value of any JSON type, biased to what pod-spec readers trip on."""
    leaves = [None, 0, 1, -1, 1.5, "", "1", "all", "NVIDIA_VISIBLE_DEVICES", True, False, [], {}]
    if depth > 2 or rng.random() < 0.4:
        return rng.choice(leaves)
    return rng.choice(
        [
            lambda: [odd(rng, depth + 1) for _ in range(rng.randint(0, 3))],
            lambda: {
                rng.choice(["name", "value", "limits", "requests", "nvidia.com/gpu", "key"]): odd(
                    rng, depth + 1
                )
                for _ in range(rng.randint(0, 3))
            },
            lambda: odd_container(rng, depth + 1),
        ]
    )()


def odd_container(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    fields = {
        "name": lambda: rng.choice(["c", None, 1]),
        "resources": lambda: rng.choice(
            [
                odd(rng, depth + 1),
                {
                    w: rng.choice([odd(rng, depth + 1), {"nvidia.com/gpu": odd(rng, depth + 1)}])
                    for w in rng.sample(["requests", "limits", "claims"], rng.randint(0, 3))
                },
            ]
        ),
        "env": lambda: rng.choice(
            [
                odd(rng, depth + 1),
                [
                    {
                        "name": rng.choice(["NVIDIA_VISIBLE_DEVICES", None, 3]),
                        "value": odd(rng, depth + 1),
                    }
                ],
            ]
        ),
        "volumeMounts": lambda: rng.choice(
            [odd(rng, depth + 1), [{"mountPath": odd(rng, depth + 1)}]]
        ),
        "securityContext": lambda: rng.choice(
            [odd(rng, depth + 1), {"privileged": odd(rng, depth + 1)}]
        ),
    }
    return {k: make() for k, make in fields.items() if rng.random() < 0.6}


def odd_spec(rng: random.Random) -> Any:
    if rng.random() < 0.2:
        return odd(rng)
    fields = {
        "containers": lambda: rng.choice(
            [odd(rng), [odd_container(rng) for _ in range(rng.randint(0, 2))]]
        ),
        "initContainers": lambda: rng.choice([odd(rng), [odd_container(rng)]]),
        "volumes": lambda: rng.choice(
            [odd(rng), [{"hostPath": rng.choice([odd(rng), {"path": odd(rng)}])}]]
        ),
        "tolerations": lambda: rng.choice([odd(rng), [{"key": odd(rng), "operator": odd(rng)}]]),
        "nodeSelector": lambda: odd(rng),
        "nodeName": lambda: odd(rng),
        "affinity": lambda: odd(rng),
        "resourceClaims": lambda: odd(rng),
    }
    return {k: make() for k, make in fields.items() if rng.random() < 0.5}


def place(path: tuple[str, ...], value: Any, rng: random.Random) -> Any:
    """`value` at `path` (list items and map values as one to two entries), or, now and then,
    the path cut short by an odd value."""
    if not path:
        return value
    if rng.random() < 0.05:
        return odd(rng)
    head, rest = path[0], path[1:]
    if head == LIST_ITEMS:
        return [place(rest, value, rng) for _ in range(rng.randint(1, 2))]
    if head == MAP_VALUES:
        return {f"k{i}": place(rest, value, rng) for i in range(rng.randint(1, 2))}
    return {head: place(rest, value, rng)}


def generated(
    rng: random.Random, kinds: list[Workload]
) -> Iterator[tuple[Workload, dict[str, Any]]]:
    for i in range(OBJECTS):
        w = kinds[i % len(kinds)]
        d = w.declared
        body: dict[str, Any] = {}
        for path in rng.sample(list(w.spec_paths) or [()], k=1):
            merged = place(path, odd_spec(rng), rng)
            if isinstance(merged, dict):
                body.update(merged)
        api = f"{d.group}/{d.versions[0]}" if d.group else d.versions[0]
        body |= {"apiVersion": api, "kind": d.kind, "metadata": {"name": f"o{i}"}}
        yield w, body


@pytest.fixture(scope="module")
def custom_kinds(installed: Installed) -> Iterator[None]:
    plane = installed.plane
    definitions = crds()
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(definitions))
    plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{crd['metadata']['name']}" for crd in definitions),
    )
    yield
    plane.kubectl(
        "delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(definitions), check=False
    )


def match_condition_errors(installed: Installed) -> float:
    text = installed.plane.get_raw("/metrics").decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_admission_match_condition_evaluation_errors_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_no_generated_object_makes_a_match_condition_fail(
    installed: Installed, namespace: str, custom_kinds: None
) -> None:
    plane = installed.plane
    rng = random.Random(SEED)
    kinds = list(DEFAULT_TABLE.kinds)
    answered: dict[int, int] = {}
    errors_before = match_condition_errors(installed)
    with httpx.Client(verify=plane.ssl_context(), timeout=30) as client:
        # the apiserver serves the new kinds once discovery has them
        eventually(
            lambda: client.get(f"{plane.url}/apis/ray.io/v1").status_code == 200,
            what="the custom kinds served",
        )
    lock = threading.Lock()
    clients = threading.local()

    def create(generated_one: tuple[Workload, dict[str, Any]]) -> None:
        w, body = generated_one
        d = w.declared
        prefix = "/api" if not d.group else f"/apis/{d.group}"
        where = f"/namespaces/{namespace}" if d.scope == "Namespaced" else ""
        url = f"{plane.url}{prefix}/{d.versions[0]}{where}/{d.resource}"
        if not hasattr(clients, "client"):
            clients.client = httpx.Client(verify=plane.ssl_context(), timeout=30)
            with lock:
                opened.append(clients.client)
        answer = clients.client.post(
            url,
            params={"dryRun": "All"},
            content=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        with lock:
            answered[answer.status_code] = answered.get(answer.status_code, 0) + 1
        text = answer.text
        assert not re.search(r"match ?condition", text, re.I), (body, text)
        assert answer.status_code in (200, 201, 400, 403, 422), (body, text)
        if answer.status_code == 403:
            assert "admission webhook" in text, text

    opened: list[httpx.Client] = []
    # the objects generated in order from the seed, then sent by a few clients at once (each
    # create is a dry run, so none depends on another)
    objects = list(generated(rng, kinds))
    try:
        concurrently(create, objects, CLIENTS)
    finally:
        for client in opened:
            client.close()
    assert sum(answered.values()) == OBJECTS
    print(f"\n{OBJECTS} generated objects of {len(kinds)} kinds, answers by status: {answered}")
    assert match_condition_errors(installed) == errors_before == 0
    # the generator reached the webhook, and the apiserver's own checks, both
    assert answered.get(201) and (answered.get(400) or answered.get(422))


def _half_gpu_template(name: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "0.5", "memory": "64Gi"}
    container = {"name": name, "image": "x", "ports": [{"containerPort": 8000}]}
    return {"spec": {"containers": [{**container, "resources": {"limits": limits}}]}}


# The serving stacks' kinds, shaped as their documented examples, each with half a GPU where
# its CRD keeps the pod template or container: (object, what the denial names).
SERVING_OBJECTS: list[tuple[dict[str, Any], str]] = [
    (
        {"apiVersion": "workloads.x-k8s.io/v1alpha2", "kind": "RoleBasedGroup",
         "spec": {"roles": [{"name": "prefill", "replicas": 2, "leaderWorkerPattern": {
             "size": 4, "template": _half_gpu_template("sglang")}}]}},
        "spec.roles[0].leaderWorkerPattern.template.spec.containers[0].resources.limits",
    ),
    (
        {"apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
         "spec": {"roles": [{"name": "decode", "spec": {"replicas": 1, "leaderWorkerTemplate": {
             "size": 2, "workerTemplate": _half_gpu_template("vllm")}}}]}},
        "spec.roles[0].spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]",
    ),
    (
        {"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
         "resource": {"count": 1, "labelSelector": {"matchLabels": {"apps": "llm"}}},
         "inference": {"template": _half_gpu_template("custom-llm-container")}},
        "inference.template.spec.containers[0].resources.limits",
    ),
    (
        {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService",
         "spec": {"image": {"repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct", "tag": "1"},
                  "replicas": 1, "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}},
        'container "s3-ctr" asks 0.5',
    ),
]  # fmt: skip


def test_the_serving_stacks_kinds_are_sent_and_judged_where_their_crds_keep_pods(
    installed: Installed, namespace: str, custom_kinds: None
) -> None:
    plane = installed.plane
    for i, (obj, named) in enumerate(SERVING_OBJECTS):
        body = {**obj, "metadata": {"name": f"s{i}", "namespace": namespace}}
        done = plane.kubectl("create", "-f", "-", stdin=json.dumps(body), check=False)
        assert done.returncode != 0, f"{obj['kind']} was admitted: {done.stdout}"
        assert "admission webhook" in done.stderr and "gpu-whole-quantity" in done.stderr
        assert named in done.stderr, done.stderr
        whole = json.loads(json.dumps(body).replace('"0.5"', '"1"'))
        plane.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(whole))
