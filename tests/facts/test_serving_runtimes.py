"""KServe serving runtimes: read into facts (objects, snapshot, live cache), the runtime a
predictor is merged over, and the /dev/shm that merge must not lose. Golden cases
`shm-kserve-*` cover whole InferenceServices; these cover the edges one at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import eventually, live_cache
from tests.support.paths import ROOT
from webhook.engine.compiled import compile_rules
from webhook.engine.decision import Decision
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts.live import SERVING_KINDS, LiveCache
from webhook.facts.model import Facts, ServingRuntimes
from webhook.facts.servingruntimes import RuntimeStore, serving_runtime
from webhook.facts.snapshotfile import SnapshotError, SnapshotFile, load_snapshot, snapshot_from_doc
from webhook.ruleset.models import RuleSet

RULES = compile_rules(RuleSet())


def runtime(
    name: str,
    *formats: dict[str, Any],
    ns: str | None = "ml-team",
    shm: str | None = "dshm",
    protocols: list[str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A ServingRuntime (ns None: a ClusterServingRuntime) whose kserve-container mounts the
    volume `shm` at /dev/shm (None: nothing there)."""
    container: dict[str, Any] = {"name": "kserve-container", "image": "example.com/server:1"}
    volumes: list[dict[str, Any]] = []
    if shm is not None:
        container["volumeMounts"] = [{"name": shm, "mountPath": "/dev/shm"}]
        volumes.append({"name": shm, "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}})
    meta: dict[str, Any] = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    body: dict[str, Any] = {
        "supportedModelFormats": list(formats),
        "containers": [container],
        "volumes": volumes,
        **spec,
    }
    if protocols is not None:
        body["protocolVersions"] = protocols
    return {"metadata": meta, "spec": body}


def fmt(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "autoSelect": True, **extra}


def isvc(model: dict[str, Any] | None = None, key: str = "model", **predictor: Any) -> Any:
    spec = {key: model} if model is not None else {}
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "m"},
        "spec": {"predictor": {**spec, **predictor}},
    }


def gpu_model(**fields: Any) -> dict[str, Any]:
    return {"resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}}, **fields}


def facts_with(
    namespaced: list[dict[str, Any]] | None, cluster: list[dict[str, Any]] | None = None
) -> Facts:
    doc: dict[str, Any] = {"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot"}
    if namespaced is not None:
        doc["servingRuntimes"] = namespaced
    if cluster is not None:
        doc["clusterServingRuntimes"] = cluster
    return snapshot_from_doc(SnapshotFile.model_validate(doc)).facts_for("ml-team")


def admit(obj: Any, facts: Facts | None) -> Decision:
    subject = subject_for(obj, namespace="ml-team")
    return evaluate(subject, RULES, facts, stage=Stage.ADMIT)


def shm_added(decision: Decision) -> list[str]:
    """Names of the volumes the patch adds to the predictor."""
    spec = decision.mutated["spec"]["predictor"]
    return [v["name"] for v in spec.get("volumes") or [] if "emptyDir" in v]


def warned(decision: Decision) -> set[str]:
    """The /dev/shm warnings (a snapshot with no nodes also warns about schedulability)."""
    return {f.rule for f in decision.warnings if f.rule == "gpu-shm"}


# ---- reading runtimes ---------------------------------------------------------------------


def test_a_runtime_is_reduced_to_what_selection_and_shm_need() -> None:
    obj = runtime(
        "hf",
        fmt("huggingface", version="1", priority=2),
        {"name": "safetensors"},
        protocols=["v2", "v1"],
        workerSpec={
            "containers": [
                {
                    "name": "worker-container",
                    "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm/"}],
                }
            ],
            "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
        },
    )
    rt = serving_runtime(obj, cluster=False)
    assert rt.name == "hf" and not rt.cluster and rt.multi_node and not rt.disabled
    assert [(f.name, f.version, f.auto_select, f.priority) for f in rt.formats] == [
        ("huggingface", "1", True, 2),
        ("safetensors", None, False, None),
    ]
    assert rt.protocols == ("v2", "v1")
    assert rt.shm_containers == {"kserve-container"} and rt.volumes == {"dshm"}
    assert rt.worker_shm_containers == {"worker-container"} and rt.worker_volumes == {"shm"}
    assert rt.priority("huggingface") == 2 and rt.priority("onnx") is None


def test_a_forged_runtime_reads_as_absent_fields_not_a_crash() -> None:
    rt = serving_runtime(
        {"metadata": [], "spec": {"containers": "x", "supportedModelFormats": [1, {"name": 2}]}},
        cluster=True,
    )
    assert rt.name == "" and rt.formats == () and rt.shm_containers == frozenset()


def test_the_store_knows_both_kinds_or_says_unknown() -> None:
    store = RuntimeStore()
    assert store.facts_for("ml-team") is None
    store.replace(
        "servingruntimes", [("ml-team", "a", serving_runtime(runtime("a"), cluster=False))]
    )
    assert store.facts_for("ml-team") is None  # the cluster's are not known yet
    assert store.not_served("clusterservingruntimes", 404)  # CRD not installed: none
    known = store.facts_for("ml-team")
    assert known is not None and set(known.namespaced) == {"a"} and not known.cluster
    assert store.facts_for("other") == ServingRuntimes({}, {})
    store.put("servingruntimes", "ml-team", "a", None)
    assert known.namespaced.keys() == {"a"}  # a value handed out never changes
    assert store.facts_for("ml-team") == ServingRuntimes({}, {})
    assert store.not_served("servingruntimes", 403)  # forbidden: unknown again
    assert store.facts_for("ml-team") is None
    assert not store.not_served("servingruntimes", 500)  # an error, retried


def test_snapshot_sections_unknown_known_and_checked(tmp_path: Path) -> None:
    assert facts_with(None).serving_runtimes is None
    cluster_only = facts_with(None, [runtime("c", ns=None)]).serving_runtimes
    assert cluster_only is not None and set(cluster_only.cluster) == {"c"}
    assert not cluster_only.namespaced  # the other section: known, and empty
    bad = tmp_path / "bad.yaml"
    doc = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "servingRuntimes": [runtime("a", ns=None)],
    }
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(SnapshotError, match=r"servingRuntimes\[0\]\.metadata\.namespace"):
        load_snapshot(bad)


# ---- which runtime, and the /dev/shm it brings --------------------------------------------


def test_runtime_without_shm_gets_a_volume_named_apart_from_the_runtimes() -> None:
    # The runtime's own volume "dshm" backs a metrics agent, not kserve-container: ours must
    # not take its name, or KServe's merge by name would replace it.
    rt = runtime("rt", fmt("onnx"), shm=None)
    rt["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {}}]
    rt["spec"]["containers"].append(
        {"name": "agent", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
    )
    decision = admit(isvc(gpu_model(modelFormat={"name": "onnx"}, runtime="rt")), facts_with([rt]))
    assert shm_added(decision) == ["dshm-1"] and not warned(decision)


def test_named_runtime_is_the_namespaces_before_the_clusters() -> None:
    ns_rt = runtime("vllm", fmt("vLLM"), shm=None)
    cluster_rt = runtime("vllm", fmt("vLLM"), ns=None)
    obj = isvc(gpu_model(modelFormat={"name": "vLLM"}, runtime="vllm"))
    assert shm_added(admit(obj, facts_with([ns_rt], [cluster_rt]))) == ["dshm"]
    assert shm_added(admit(obj, facts_with([], [cluster_rt]))) == []


def test_a_named_runtime_is_used_even_without_autoselect() -> None:
    rt = runtime("rt", {"name": "custom"}, shm=None)
    decision = admit(
        isvc(gpu_model(modelFormat={"name": "custom"}, runtime="rt")), facts_with([rt])
    )
    assert shm_added(decision) == ["dshm"]


@pytest.mark.parametrize(
    "model_format,candidates,added",
    [
        # a version in the model must match the runtime's; without one any version does
        ({"name": "sklearn", "version": "1"}, [fmt("sklearn", version="2")], None),
        ({"name": "sklearn"}, [fmt("sklearn", version="2")], []),
        # autoSelect false: never auto-selected
        ({"name": "sklearn"}, [{"name": "sklearn"}], None),
    ],
)
def test_auto_selection_matches_format_and_version(
    model_format: dict[str, Any], candidates: list[dict[str, Any]], added: list[str] | None
) -> None:
    decision = admit(
        isvc(gpu_model(modelFormat=model_format)), facts_with([runtime("rt", *candidates)])
    )
    if added is None:
        assert shm_added(decision) == [] and warned(decision) == {"gpu-shm"}
    else:
        assert shm_added(decision) == added and not warned(decision)


def test_auto_selection_skips_disabled_multi_model_and_multi_node_runtimes() -> None:
    skipped = [
        runtime("off", fmt("xgboost"), shm=None, disabled=True),
        runtime("mm", fmt("xgboost"), shm=None, multiModel=True),
        runtime("mn", fmt("xgboost"), shm=None, workerSpec={"containers": [{"name": "w"}]}),
    ]
    good = runtime("good", fmt("xgboost"))
    obj = isvc(gpu_model(modelFormat={"name": "xgboost"}))
    assert shm_added(admit(obj, facts_with([*skipped, good]))) == []
    assert warned(admit(obj, facts_with(skipped))) == {"gpu-shm"}  # none is left


def test_auto_selection_prefers_the_namespace_then_the_highest_priority() -> None:
    obj = isvc(gpu_model(modelFormat={"name": "xgboost"}))
    ns_rt = runtime("ns", fmt("xgboost"), shm=None)
    cluster_rt = runtime("cl", fmt("xgboost", priority=9), ns=None)
    assert shm_added(admit(obj, facts_with([ns_rt], [cluster_rt]))) == ["dshm"]
    low = runtime("low", fmt("xgboost", priority=1), shm=None)
    high = runtime("high", fmt("xgboost", priority=2))
    unranked = runtime("unranked", fmt("xgboost"), shm=None)
    assert shm_added(admit(obj, facts_with([low, high, unranked]))) == []


def test_auto_selection_reads_the_protocol_kserve_defaults() -> None:
    v1_only = runtime("v1", fmt("triton"), protocols=["v1"], shm=None)
    v2 = runtime("v2", fmt("triton"), protocols=["v2", "grpc-v2"])
    facts = facts_with([v1_only, v2])
    # The triton shortcut and a triton model default to v2; an explicit v1 picks v1.
    assert shm_added(admit(isvc(gpu_model(), key="triton"), facts)) == []
    assert shm_added(admit(isvc(gpu_model(modelFormat={"name": "triton"})), facts)) == []
    v1_model = gpu_model(modelFormat={"name": "triton"}, protocolVersion="v1")
    assert shm_added(admit(isvc(v1_model), facts)) == ["dshm"]


def test_runtimes_unknown_to_the_source_leave_the_predictor_alone_with_a_warning() -> None:
    decision = admit(isvc(gpu_model(modelFormat={"name": "onnx"})), facts_with(None))
    assert shm_added(decision) == [] and warned(decision) == {"gpu-shm"}
    assert "(none added: runtimes unknown)" in decision.warning_lines()[0]


def test_the_warning_says_where_to_set_shm_and_stays_a_warning_line() -> None:
    decision = admit(isvc(gpu_model(modelFormat={"name": "onnx"})), None)
    (finding,) = decision.warnings
    assert finding.field == "spec.predictor.model.volumeMounts"
    message = finding.message()
    assert "{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}" in message
    assert "in its container 'kserve-container'" in message
    assert "spec.predictor.volumes and spec.predictor.model.volumeMounts" in message
    assert len(decision.warning_lines()[0]) <= 120


def test_the_warning_follows_the_rule_mode_and_the_mutation_switch() -> None:
    obj = isvc(gpu_model(modelFormat={"name": "onnx", "version": "9"}))
    subject = subject_for(obj, namespace="ml-team")
    known = facts_with([runtime("rt", fmt("onnx", version="1"))])
    for settings, facts, expected in (
        ({"gpu-shm": {"mode": "off"}}, None, "nothing"),
        ({"gpu-shm": {"mutate": False}}, None, "nothing"),
        # enforce: a runtime the cluster lacks is denied; runtimes unknown are only warned
        ({"gpu-shm": {"mode": "enforce"}}, None, "warned"),
        ({"gpu-shm": {"mode": "enforce"}}, known, "denied"),
    ):
        rules = compile_rules(RuleSet.model_validate({"rules": settings}))
        decision = evaluate(subject, rules, facts)
        denied = {f.rule for f in decision.denials} == {"gpu-shm"}
        found = "denied" if denied else "warned" if warned(decision) else "nothing"
        assert found == expected, settings


def test_a_gpu_sidecar_beside_the_model_gets_shm_when_the_runtime_gives_the_model_one() -> None:
    sidecar = {"name": "agent", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    obj = isvc(gpu_model(modelFormat={"name": "vLLM"}, runtime="rt"), containers=[sidecar])
    decision = admit(obj, facts_with([runtime("rt", fmt("vLLM"))]))
    assert shm_added(decision) == ["dshm-1"]  # "dshm" is the runtime's
    predictor = decision.mutated["spec"]["predictor"]
    assert "volumeMounts" not in predictor["model"]
    assert predictor["containers"][0]["volumeMounts"] == [
        {"name": "dshm-1", "mountPath": "/dev/shm"}
    ]


def test_an_existing_shm_is_never_replaced_or_resized() -> None:
    model = gpu_model(
        modelFormat={"name": "vLLM"},
        volumeMounts=[{"name": "mine", "mountPath": "/dev//shm/"}],
    )
    obj = isvc(model, volumes=[{"name": "mine", "emptyDir": {"sizeLimit": "1Gi"}}])
    for facts in (None, facts_with([runtime("rt", fmt("vLLM"), shm=None)])):
        decision = admit(obj, facts)
        assert not any("/volumes" in op["path"] for op in decision.patch)
        assert "gpu-shm" not in warned(decision)


def test_a_worker_spec_keeps_the_workers_shm_of_every_multi_node_runtime() -> None:
    worker = {
        "containers": [
            {"name": "worker-container", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]
    }
    obj = isvc(gpu_model(modelFormat={"name": "huggingface"}), workerSpec=worker)
    brings = {
        "containers": [
            {"name": "worker-container", "volumeMounts": [{"name": "s", "mountPath": "/dev/shm"}]}
        ],
        "volumes": [{"name": "s", "emptyDir": {"medium": "Memory"}}],
    }
    multi = runtime("mn", fmt("huggingface"), workerSpec=brings)
    decision = admit(obj, facts_with([multi]))
    assert decision.patch == () or not any(
        "workerSpec/volumes" in op["path"] for op in decision.patch
    )
    assert not warned(decision)
    lacking = runtime(
        "mn2", fmt("huggingface"), ns=None, workerSpec={"containers": [{"name": "w"}]}
    )
    decision = admit(obj, facts_with([multi], [lacking]))
    assert {(f.rule, f.field) for f in decision.warnings if f.rule == "gpu-shm"} == {
        ("gpu-shm", "spec.predictor.workerSpec.containers[0].volumeMounts")
    }


def test_transformer_and_explainer_use_no_runtime() -> None:
    gpu = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    obj = isvc({"modelFormat": {"name": "sklearn"}})
    obj["spec"]["transformer"] = {"containers": [gpu]}
    obj["spec"]["explainer"] = {"containers": [dict(gpu)]}
    decision = admit(obj, None)
    assert not warned(decision)
    for part in ("transformer", "explainer"):
        assert decision.mutated["spec"][part]["volumes"][0]["name"] == "dshm"


# ---- the live cache -----------------------------------------------------------------------


def names(live: LiveCache, ns: str = "ml-team") -> tuple[set[str], set[str]] | None:
    known = live.facts_for(ns).serving_runtimes
    return None if known is None else (set(known.namespaced), set(known.cluster))


def shm_of(live: LiveCache, cluster_runtime: str) -> frozenset[str] | None:
    known = live.facts_for("ml-team").serving_runtimes
    found = known.cluster.get(cluster_runtime) if known is not None else None
    return found.shm_containers if found is not None else None


def test_live_lists_and_follows_both_runtime_kinds(server: FakeApiServer) -> None:
    server.load("servingruntimes", [runtime("a", fmt("onnx"))])
    server.load("clusterservingruntimes", [runtime("c", fmt("onnx"), ns=None)])
    live = live_cache(server)
    live.start()
    try:
        assert live.wait_synced(10)
        eventually(lambda: names(live) == ({"a"}, {"c"}))
        server.put("servingruntimes", runtime("b", fmt("onnx"), ns="other"))
        eventually(lambda: names(live, "other") == ({"b"}, {"c"}))
        server.put("clusterservingruntimes", runtime("c", fmt("onnx"), ns=None, shm=None))
        eventually(lambda: shm_of(live, "c") == frozenset())
        server.delete("servingruntimes", "ml-team", "a")
        eventually(lambda: names(live) == (set(), {"c"}))
    finally:
        live.stop()


def test_live_kserve_not_installed_is_known_empty_and_forbidden_is_unknown(
    server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.missing = {"servingruntimes", "clusterservingruntimes"}
    live = live_cache(server)
    live.list_once()
    assert names(live) == (set(), set())
    server.missing = set()
    server.forbidden = {"servingruntimes"}
    live = live_cache(server)
    live.list_once()
    assert names(live) is None
    assert "servingruntimes: not allowed to list them (403)" in caplog.text


def test_the_cluster_role_may_list_and_watch_the_runtimes() -> None:
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "base" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    for kind in SERVING_KINDS:
        assert any(
            kind.group in rule["apiGroups"]
            and kind.name in rule["resources"]
            and {"list", "watch"} <= set(rule["verbs"])
            for rule in role["rules"]
        ), kind.name
