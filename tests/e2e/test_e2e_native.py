"""The exported native policies through the real apiserver, with the webhook removed: on the
golden cases of built-in kinds that need no cluster facts, the ValidatingAdmissionPolicies
deny and warn exactly where the webhook's exported rules do, and the MutatingAdmissionPolicies
give the GPU limits, tolerations and probe delays the webhook's patch gives."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.support import ROOT, Installed, eventually, gpu_pod, post_review, wait_until_called
from webhook.engine.compiled import compile_rules
from webhook.export.bundle import MUTATING_SINCE, VALIDATING_SINCE, build
from webhook.quantity import parse_quantity
from webhook.ruleset.files import load_rules

GOLDEN = ROOT / "tests" / "golden"
BUILT_IN = {
    "Pod": ("/api/v1", "pods", ("spec",)),
    "Deployment": ("/apis/apps/v1", "deployments", ("spec", "template", "spec")),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", ("spec", "template", "spec")),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", ("spec", "template", "spec")),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", ("spec", "template", "spec")),
    "Job": ("/apis/batch/v1", "jobs", ("spec", "template", "spec")),
}
NAMESPACE = "native-golden"


def cases() -> Iterator[tuple[str, dict[str, Any]]]:
    """Golden cases the policies can be held to: a built-in kind created with the shipped rules
    and no cluster facts (what a policy cannot read)."""
    for folder in sorted(GOLDEN.iterdir()):
        if not (folder / "input.yaml").exists():  # the shared cluster.yaml is no case
            continue
        if any((folder / f).exists() for f in ("rules.yaml", "cluster.yaml", "request.yaml")):
            continue
        obj = yaml.safe_load((folder / "input.yaml").read_text())
        if (
            isinstance(obj, dict)
            and obj.get("kind") in BUILT_IN
            and "/"
            not in str(obj.get("apiVersion", "v1")).replace("apps/", "").replace("batch/", "")
        ):
            obj.setdefault("metadata", {})["name"] = folder.name[:60].strip("-")
            obj["metadata"].pop("namespace", None)
            yield folder.name, obj


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    node: Any = obj
    for key in BUILT_IN[obj["kind"]][2]:
        node = node.get(key, {}) if isinstance(node, dict) else {}
    return node if isinstance(node, dict) else {}


def mutated_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """What the exported mutations write: GPU limits, GPU tolerations, probe delays."""
    spec = spec_of(obj)
    # as the apiserver stores them: an empty field left out, a quantity in canonical form
    out: dict[str, Any] = {
        "tolerations": sorted(
            json.dumps({k: v for k, v in t.items() if v != ""}, sort_keys=True)
            for t in spec.get("tolerations", []) or []
            if isinstance(t, dict) and str(t.get("key", "")).endswith("/gpu")
        )
    }
    for group in ("initContainers", "containers"):
        for c in spec.get(group, []) or []:
            limits = (c.get("resources") or {}).get("limits") or {}
            out[f"{group}/{c.get('name')}/limits"] = {
                k: parse_quantity(v) for k, v in limits.items() if k not in ("cpu", "memory")
            }
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                if isinstance(c.get(probe), dict):
                    # (the apiserver fills in a probe's other defaults, on its side only)
                    out[f"{group}/{c.get('name')}/{probe}"] = c[probe].get("initialDelaySeconds")
    return out


@pytest.fixture(scope="module")
def natively(
    installed: Installed, stored_policies: list[dict[str, Any]]
) -> Iterator[dict[str, set[str]]]:
    """The webhook unregistered and the exported policies in force (the run's stored policies,
    bound here); the exported rules."""
    plane = installed.plane
    version = tuple(int(x) for x in plane.release.minor.removeprefix("v").split("."))
    rules = compile_rules(load_rules(ROOT / "manifests" / "base" / "rules"))
    export = build(rules, (version[0], version[1]))
    assert [d for d in export.objects if d["kind"].endswith("Policy")] == stored_policies
    bindings = [d for d in export.objects if d["kind"].endswith("PolicyBinding")]
    exported = {"validation": set(), "mutation": set()}
    for rule, part, _ in export.exported:
        if part in exported:
            exported[part].add(rule)
    for config in installed.webhook_configs:
        plane.kubectl("delete", config["kind"].lower(), config["metadata"]["name"])
    try:
        plane.kubectl("create", "namespace", NAMESPACE)
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(bindings), timeout=600)
        yield exported
    finally:
        # whatever happened, the webhook is registered again for the tests after this one
        plane.kubectl("delete", "-f", "-", stdin=yaml.safe_dump_all(bindings), check=False)
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(installed.webhook_configs))
        plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        wait_until_called(installed)


def rules_named(text: str, rules: set[str]) -> set[str]:
    return {r for r in rules if re.search(rf"(^|[\s'\":]){re.escape(r)}:", text)}


def test_the_native_policies_decide_and_mutate_as_the_webhook(
    installed: Installed, request: pytest.FixtureRequest
) -> None:
    plane = installed.plane
    version = tuple(int(x) for x in plane.release.minor.removeprefix("v").split("."))
    if version < VALIDATING_SINCE:
        # nothing to hold to account: the export leaves every rule to the webhook here, and
        # test_e2e_install shows this apiserver refusing the policies of the next release
        export = build(
            compile_rules(load_rules(ROOT / "manifests" / "base" / "rules")),
            (version[0], version[1]),
        )
        assert not [d for d in export.objects if d["kind"].endswith("Policy")]
        return
    natively: dict[str, set[str]] = request.getfixturevalue("natively")
    assert natively["validation"], "nothing exported"
    if version >= MUTATING_SINCE:
        assert natively["mutation"]
    compared, refused, differences = 0, 0, []
    with httpx.Client(verify=plane.ssl_context(), timeout=30) as client:
        # bound policies take effect once the apiserver has compiled them: a second or so on a
        # quiet machine, tens of seconds each on a busy one
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "x",
                        "resources": {
                            "limits": {
                                "nvidia.com/gpu": "1",
                                "nvidia.com/mig-1g.10gb": "1",
                                "memory": "1Gi",
                            }
                        },
                    }
                ]
            },
        }
        url = f"{plane.url}/api/v1/namespaces/{NAMESPACE}/pods"
        eventually(
            lambda: client.post(url, params={"dryRun": "All"}, json=probe).status_code != 201,
            seconds=120,
            what="the validating policies in force",
        )
        if version >= MUTATING_SINCE:
            # each mutating policy is compiled and in force on its own time
            asks = gpu_pod("asks")

            def all_mutations() -> bool:
                answer = client.post(url, params={"dryRun": "All"}, json=asks)
                if answer.status_code != 201:
                    return False
                c = answer.json()["spec"]["containers"][0]
                tolerations = answer.json()["spec"].get("tolerations", [])
                return (
                    c["resources"].get("limits", {}).get("nvidia.com/gpu") == "1"
                    and c["readinessProbe"].get("initialDelaySeconds", 0) >= 60
                    and any(t.get("key") == "nvidia.com/gpu" for t in tolerations)
                )

            eventually(all_mutations, seconds=120, what="the mutating policies in force")
        for name, obj in cases():
            prefix, resource, _ = BUILT_IN[obj["kind"]]
            answer = client.post(
                f"{plane.url}{prefix}/namespaces/{NAMESPACE}/{resource}",
                params={"dryRun": "All"},
                json=obj,
            )
            policy_denied = "ValidatingAdmissionPolicy" in answer.text
            if answer.status_code not in (200, 201) and not policy_denied:
                refused += 1  # the apiserver's own validation: neither gets to judge it
                continue
            mutate = post_review(installed, "mutate", obj, NAMESPACE)
            patched = mutate.apply(copy.deepcopy(obj))
            validate = post_review(installed, "validate", patched, NAMESPACE)
            webhook_denied = rules_named(validate.message, natively["validation"])
            native_denied = (
                rules_named(answer.text, natively["validation"]) if policy_denied else set()
            )
            warned = set().union(
                *(
                    rules_named(w, natively["validation"])
                    for w in mutate.warnings + validate.warnings
                )
            )
            native_warned = set().union(
                *(
                    rules_named(w, natively["validation"])
                    for w in answer.headers.get_list("warning")
                )
            )
            compared += 1
            if webhook_denied != native_denied:
                differences.append((name, "denied", webhook_denied, native_denied))
                continue
            if not webhook_denied and warned != native_warned:
                differences.append((name, "warned", warned, native_warned))
            if not webhook_denied and version >= MUTATING_SINCE:
                ours, theirs = mutated_fields(patched), mutated_fields(answer.json())
                if ours != theirs:
                    differences.append(
                        (  # type: ignore[arg-type]
                            name,
                            "mutated",
                            {
                                k: (ours.get(k), theirs.get(k))
                                for k in ours.keys() | theirs.keys()
                                if ours.get(k) != theirs.get(k)
                            },
                            "webhook, native",
                        )
                    )
    print(
        f"\nnative policies against the webhook: {compared} golden cases compared, "
        f"{refused} refused by the apiserver's own validation first"
    )
    assert compared >= 50
    assert not differences, "\n".join(map(str, differences[:20]))


def test_policies_are_not_exported_where_the_apiserver_would_refuse_them(
    installed: Installed, tmp_path: Path
) -> None:
    version = tuple(int(x) for x in installed.plane.release.minor.removeprefix("v").split("."))
    export = build(
        compile_rules(load_rules(ROOT / "manifests" / "base" / "rules")), (version[0], version[1])
    )
    kinds = {d["kind"] for d in export.objects}
    assert ("ValidatingAdmissionPolicy" in kinds) == (version >= VALIDATING_SINCE)
    assert ("MutatingAdmissionPolicy" in kinds) == (version >= MUTATING_SINCE)
