"""The shipped rules load, and a broken rule folder is refused with the file and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT
from webhook.ruleset import resolve
from webhook.ruleset.files import RuleFileError, load_rules, load_rules_with_sources
from webhook.ruleset.models import RuleSet


def test_the_shipped_rules_spell_out_exactly_the_built_in_defaults() -> None:
    assert load_rules(ROOT / "rules") == RuleSet()


def _folder(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_rules_may_be_split_across_files(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        **{
            "a.yaml": "rules:\n  gpu-shm:\n    maxSize: 4Gi\n",
            "b.yaml": "rules:\n  visible-devices:\n    mode: warn\n",
        },
    )
    rules = load_rules(folder)
    assert rules.rules.gpu_shm.max_size == "4Gi"
    assert rules.rules.visible_devices.mode == "warn"


SHM_KEYS = "mutate, mode, volumeName, memoryFraction, minSize, maxSize, defaultSize"
RULE_IDS = (
    "gpu-requests-limits, gpu-whole-quantity, gpu-mig-mixed, gpu-tolerations, gpu-shm, "
    "gpu-probe-delays, visible-devices, privileged-gpu, host-gpu-devices, "
    "gpu-toleration-without-gpu, gpu-memory-limit, gpu-readiness-probe, gpu-init-container, "
    "gpu-quota, gpu-priority-class, gpu-schedulable, gpu-queue, gpu-spend"
)
BUDGET = "rules:\n  gpu-quota:\n    budgets:\n      - name: a\n        namespaces: [a]\n"
WORKLOAD = "workloads:\n  - group: a.io\n    kind: A\n    resource: as\n    versions: [v1]\n"

# The whole line each broken file gets: where (the key when the key is wrong, else the value),
# the field, what is wrong in our words and how to fix it.
BROKEN = {
    "typo in a field": (
        "rules:\n  gpu-shm:\n    maxSise: 4Gi\n",
        "a.yaml:3:5: rules.gpu-shm.maxSise: unknown key. "
        f"Fix: did you mean maxSize? The keys here are: {SHM_KEYS}",
    ),
    "a key in another spelling": (
        "rules:\n  gpu-shm:\n    max_size: 4Gi\n",
        f"a.yaml:3:5: rules.gpu-shm.max_size: unknown key. Fix: did you mean maxSize? The keys "
        f"here are: {SHM_KEYS}",
    ),
    "unknown rule": (
        "rules:\n  gpu-shmm: {}\n",
        f"a.yaml:2:3: rules.gpu-shmm: unknown key. Fix: did you mean gpu-shm? The keys here "
        f"are: {RULE_IDS}",
    ),
    "unknown top-level key": (
        "mode: warn\nexemption: {}\n",
        "a.yaml:2:1: exemption: unknown key. Fix: did you mean exemptions? The keys here are: "
        "mode, gpuResources, gpuDeviceClasses, gpuSharing, exemptions, cluster, rules, "
        "overrides, workloads",
    ),
    "wrong mode": (
        "rules:\n  privileged-gpu:\n    mode: deny\n",
        "a.yaml:3:11: rules.privileged-gpu.mode: 'deny' is not one of: enforce, warn, audit, off. "
        "Fix: write one of: enforce, warn, audit, off",
    ),
    "a mode misspelt": (
        "rules:\n  privileged-gpu: {mode: enforced}\n",
        "a.yaml:2:26: rules.privileged-gpu.mode: 'enforced' is not one of: enforce, warn, audit, "
        "off. Fix: write enforce (one of: enforce, warn, audit, off)",
    ),
    "wrong type": (
        "rules:\n  gpu-shm:\n    memoryFraction: half\n",
        "a.yaml:3:21: rules.gpu-shm.memoryFraction: expected a number, found 'half'. "
        "Fix: write a number, e.g. memoryFraction: 0.5",
    ),
    "a list for true or false": (
        "rules:\n  gpu-shm:\n    mutate: [yes]\n",
        "a.yaml:3:13: rules.gpu-shm.mutate: expected true or false, found a list. "
        "Fix: write true or false, e.g. mutate: true",
    ),
    "a list where settings go": (
        "rules:\n  gpu-shm:\n    - maxSize: 4Gi\n",
        "a.yaml:2:3: rules.gpu-shm: expected a mapping, found a list. "
        "Fix: write a mapping, e.g. gpu-shm: {mutate: true, mode: warn, volumeName: dshm}",
    ),
    "bad quantity": (
        "rules:\n  gpu-shm:\n    minSize: lots\n",
        "a.yaml:3:14: rules.gpu-shm.minSize: 'lots' is not a quantity. "
        "Fix: write a Kubernetes quantity, e.g. 16Gi or 512Mi",
    ),
    "min above max": (
        "rules:\n  gpu-shm:\n    minSize: 32Gi\n",
        "a.yaml:3:14: rules.gpu-shm.minSize: minSize 32Gi is larger than maxSize 16Gi. "
        "Fix: lower minSize or raise maxSize",
    ),
    "too small": (
        "cluster:\n  maxStalenessSeconds: 0\n",
        "a.yaml:2:24: cluster.maxStalenessSeconds: must be at least 1, found 0. "
        "Fix: give a whole number of at least 1",
    ),
    "bad selector": (
        "exemptions:\n  podSelector:\n    matchExpressions:\n      - {key: a, operator: In}\n",
        "a.yaml:4:9: exemptions.podSelector.matchExpressions.0: operator In needs at least one "
        "value. Fix: add values: [a, b] (the label values to match), or use operator Exists",
    ),
    "a service account without its namespace": (
        "exemptions:\n  serviceAccounts: [gpu-operator/dcgm, dcgm]\n",
        "a.yaml:2:40: exemptions.serviceAccounts.1: 'dcgm' must be namespace/name. Fix: write "
        "the service account's namespace and name, e.g. gpu-operator/dcgm",
    ),
    "override typo": (
        "overrides:\n  - name: x\n    namespaces: [a]\n    rules:\n      gpu-shm: {maxSise: 1Gi}\n",
        "a.yaml:5:17: overrides.0.rules.gpu-shm.maxSise: unknown key. "
        f"Fix: did you mean maxSize? The keys here are: {SHM_KEYS}",
    ),
    "override of an unknown rule": (
        "overrides:\n  - name: x\n    namespaces: [a]\n    rules:\n      gpu-shmm: {}\n",
        "a.yaml:5:7: overrides.0.rules.gpu-shmm: unknown key. "
        f"Fix: did you mean gpu-shm? The keys here are: {RULE_IDS}",
    ),
    "override of a wrong value": (
        "overrides:\n  - name: x\n    namespaces: [a]\n    rules:\n"
        "      gpu-probe-delays:\n        readinessMinDelaySeconds: -5\n",
        "a.yaml:6:35: overrides.0.rules.gpu-probe-delays.readinessMinDelaySeconds: must be at "
        "least 0, found -5. Fix: give a whole number of at least 0",
    ),
    "override selects nothing": (
        "overrides:\n  - name: x\n    rules: {}\n",
        "a.yaml:2:5: overrides.0: an override needs namespaces or a namespaceSelector. "
        "Fix: add namespaces: [research-*] or namespaceSelector: {matchLabels: {team: x}}",
    ),
    "duplicate override": (
        "overrides:\n  - {name: x, namespaces: [a], rules: {}}\n"
        "  - {name: x, namespaces: [b], rules: {}}\n",
        "a.yaml:3:12: overrides.1.name: override names must be unique: x. "
        "Fix: rename one of them, or merge the two into one override",
    ),
    "negative budget": (
        BUDGET + "        limits: {nvidia.com/gpu: -2}\n",
        "a.yaml:6:34: rules.gpu-quota.budgets.0.limits.nvidia.com/gpu: must be more than 0, "
        "found -2. Fix: give a positive whole number, or remove the nvidia.com/gpu entry",
    ),
    "zero product budget": (
        BUDGET + "        products: {H100: {nvidia.com/gpu: 0}}\n",
        "a.yaml:6:43: rules.gpu-quota.budgets.0.products.H100.nvidia.com/gpu: must be more than "
        "0, found 0. Fix: give a positive whole number, or remove the nvidia.com/gpu entry",
    ),
    "a number as a resource name": (
        BUDGET + "        limits:\n          1: 4\n",
        "a.yaml:7:11: rules.gpu-quota.budgets.0.limits.1: the key 1 is not text. Fix: write the "
        'key as text, in quotes: "1"',
    ),
    "missing setting": (
        "overrides:\n  - {namespaces: [a], rules: {}}\n",
        "a.yaml:2:5: overrides.0.name: required. Fix: add name: research",
    ),
    "empty name": (
        "overrides:\n  - {name: '', namespaces: [a], rules: {}}\n",
        "a.yaml:2:12: overrides.0.name: must not be empty. Fix: give it a value, e.g. "
        "name: research",
    ),
    "a template that is neither a path nor a mapping": (
        WORKLOAD + "    podTemplates: [5]\n",
        "a.yaml:6:20: workloads.0.podTemplates.0: expected text or a mapping, found 5. "
        "Fix: write text or a mapping, e.g. spec.template",
    ),
    "a replica path that is neither text nor a list": (
        WORKLOAD + "    podTemplates:\n      - path: spec.t\n        replicas: [{path: 5}]\n",
        "a.yaml:8:27: workloads.0.podTemplates.0.replicas.0.path: expected text or a list, "
        "found 5. Fix: write text or a list, e.g. path: spec.replicas",
    ),
    "a template path with a typo": (
        WORKLOAD + "    podTemplates: [spec.template, spec..template]\n",
        "a.yaml:6:35: workloads.0.podTemplates.1: 'spec..template': '' is not a field name, "
        "name[*] (each list item) or * (each map value). Fix: write a dotted path of field "
        "names, e.g. spec.template or spec.workers[*].template",
    ),
    "a kind in lower case": (
        WORKLOAD.replace("kind: A", "kind: modelServer") + "    podSpecs: [spec]\n",
        "a.yaml:3:11: workloads.0.kind: 'modelServer' does not match the pattern "
        "^[A-Z][A-Za-z0-9]*$. Fix: write a value matching ^[A-Z][A-Za-z0-9]*$, e.g. "
        "kind: ModelServer",
    ),
    "an unquoted on": (
        "mode: on\n",
        "a.yaml:1:7: mode: YAML read this value as true (on, yes and true all are); a mode is one "
        'of enforce, warn, audit, off. Fix: write the mode in quotes, e.g. mode: "enforce"',
    ),
    "not a mapping": (
        "- 1\n- 2\n",
        "a.yaml:1:1: expected a mapping at the top, found a list. Fix: start the file with "
        "top-level keys such as rules:, exemptions: or overrides:",
    ),
}


@pytest.mark.parametrize("text,expected", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_rule_file_gets_one_line_naming_file_line_column_field_and_fix(
    tmp_path: Path, text: str, expected: str
) -> None:
    folder = _folder(tmp_path, **{"a.yaml": text})
    with pytest.raises(RuleFileError) as err:
        load_rules(folder)
    assert err.value.problems == [f"{folder}/{expected}"]


def test_the_check_command_prints_the_same_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.cli import main

    text, expected = BROKEN["negative budget"]
    folder = _folder(tmp_path, **{"a.yaml": text})
    assert main(["rules", "check", str(folder)]) == 1
    assert capsys.readouterr().out == f"{folder}/{expected}\n"


def test_every_problem_is_listed_by_file_then_line_then_column(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        **{
            "a.yaml": "rules:\n  gpu-shm:\n    maxSise: 4Gi\n  privileged-gpu: {mode: deny}\n",
            # validation meets minSize before maxSize, the file says maxSize first
            "b.yaml": "mode: nope\nrules:\n  gpu-shm: {maxSize: lots, minSize: lots}\n",
        },
    )
    with pytest.raises(RuleFileError) as err:
        load_rules(folder)
    where = [p.split(": ", 1)[0].rsplit("/", 1)[-1] for p in err.value.problems]
    assert where == ["a.yaml:3:5", "a.yaml:4:26", "b.yaml:1:7", "b.yaml:3:22", "b.yaml:3:37"]
    assert all(". Fix: " in p for p in err.value.problems)


def test_syntax_errors_of_several_files_are_each_named_with_line_and_column(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path, **{"a.yaml": "rules: {\n", "b.yaml": "x: 'open\n"})
    with pytest.raises(RuleFileError) as err:
        load_rules(folder)
    first, second = err.value.problems
    assert first.startswith(f"{folder / 'a.yaml'}:2:1: not valid YAML (") and ". Fix: " in first
    assert second.startswith(f"{folder / 'b.yaml'}:2:1: not valid YAML (") and ". Fix: " in second


def test_a_file_that_is_not_text_is_refused_in_plain_words(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_bytes(b"mode: \xff\xfe\n")
    with pytest.raises(
        RuleFileError, match=r"a\.yaml: not UTF-8 text \(byte 6 .*\)\. Fix: save the file as UTF-8"
    ):
        load_rules(tmp_path)


def test_later_files_override_earlier_ones_key_by_key_and_say_where(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        **{
            "a.yaml": "rules:\n  gpu-shm:\n    maxSize: 4Gi\n    minSize: 2Gi\n"
            "gpuResources: [nvidia.com/gpu]\n",
            "b.yaml": "rules:\n  gpu-shm:\n    maxSize: 8Gi\ngpuResources: [amd.com/gpu]\n",
        },
    )
    loaded = load_rules_with_sources(folder)
    shm = loaded.rules.rules.gpu_shm
    assert (shm.max_size, shm.min_size) == ("8Gi", "2Gi")  # maps merge
    assert loaded.rules.gpu_resources == ["amd.com/gpu"]  # lists are replaced whole
    assert str(loaded.lines[("rules", "gpu-shm", "maxSize")]) == f"{folder}/b.yaml:3:5"
    assert str(loaded.lines[("rules", "gpu-shm", "minSize")]) == f"{folder}/a.yaml:4:5"


def test_overrides_and_workloads_are_replaced_by_name_and_added_otherwise(
    tmp_path: Path,
) -> None:
    def override(name: str, ns: str, size: str) -> str:
        return (
            f"  - name: {name}\n    namespaces: [{ns}]\n"
            f"    rules: {{gpu-shm: {{maxSize: {size}}}}}\n"
        )

    folder = _folder(
        tmp_path,
        **{
            "a.yaml": "overrides:\n" + override("lab", "lab", "2Gi") + override("ci", "ci", "1Gi"),
            "b.yaml": "overrides:\n" + override("lab", "lab-*", "4Gi") + override("x", "x", "3Gi"),
        },
    )
    loaded = load_rules_with_sources(folder)
    assert [(o.name, o.namespaces) for o in loaded.rules.overrides] == [
        ("lab", ["lab-*"]),
        ("ci", ["ci"]),
        ("x", ["x"]),
    ]
    assert str(loaded.lines[("overrides", 0, "namespaces")]) == f"{folder}/b.yaml:3:5"
    assert str(loaded.lines[("overrides", 1, "namespaces")]) == f"{folder}/a.yaml:6:5"


def test_the_documented_rule_change_saved_beside_the_shipped_file_layers_over_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.cli import main

    page = (ROOT / "docs" / "writing-rules.md").read_text()
    marker = "such as `rules/team.yaml`:\n\n```yaml\n"
    example = page.split(marker, 1)[1].split("```", 1)[0]
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "gpu-admission.yaml").write_text((ROOT / "rules" / "gpu-admission.yaml").read_text())
    (folder / "team.yaml").write_text(example)
    assert main(["rules", "check", str(folder)]) == 0
    capsys.readouterr()
    assert main(["rules", "explain", str(folder), "--namespace", "ml-team"]) == 0
    shown = capsys.readouterr().out
    assert f'maxSize: "32Gi"    # {folder / "team.yaml"}:3:5\n' in shown


def test_an_unquoted_off_is_the_mode_off_and_an_unquoted_on_is_explained(
    tmp_path: Path,
) -> None:
    # YAML 1.1 reads `off` as false and `on` as true: the first is what was meant.
    text = "mode: off\nrules:\n  gpu-shm:\n    mode: off\n"
    rules = load_rules(_folder(tmp_path, **{"a.yaml": text}))
    assert rules.mode == "off" and rules.rules.gpu_shm.mode == "off"
    override = (
        "overrides:\n  - name: quiet\n    namespaces: [lab]\n"
        "    rules:\n      gpu-memory-limit: {mode: off}\n"
    )
    (tmp_path / "o").mkdir()
    (tmp_path / "on").mkdir()
    rules = load_rules(_folder(tmp_path / "o", **{"a.yaml": override}))
    assert resolve.resolve(rules, "lab", None).rules.rules.gpu_memory_limit.mode == "off"
    with pytest.raises(RuleFileError, match="YAML read this value as true"):
        load_rules(_folder(tmp_path / "on", **{"a.yaml": "mode: on\n"}))


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        # A name that is no plain value: refused by validation, naming the field, never a crash.
        (
            "overrides:\n  - {name: lab, namespaces: [lab], rules: {}}\n",
            "overrides:\n  - {name: [lab], namespaces: [lab], rules: {}}\n",
            "overrides.1.name",
        ),
        (
            "workloads:\n  - {group: a.io, kind: A, resource: as, versions: [v1], "
            "podSpecs: [spec]}\n",
            "workloads:\n  - {group: a.io, kind: {x: 1}, resource: as, versions: [v1], "
            "podSpecs: [spec]}\n",
            "workloads.1.kind",
        ),
        # One file naming an override twice is refused as it would be alone, not merged.
        (
            "overrides:\n  - {name: lab, namespaces: [lab], rules: {}}\n",
            "overrides:\n  - {name: lab, namespaces: [a], rules: {}}\n"
            "  - {name: lab, namespaces: [b], rules: {}}\n",
            "override names must be unique: lab",
        ),
    ],
)
def test_layering_refuses_what_it_cannot_key_naming_it(
    tmp_path: Path, first: str, second: str, expected: str
) -> None:
    folder = _folder(tmp_path, **{"a.yaml": first, "b.yaml": second})
    with pytest.raises(RuleFileError, match=re.escape(expected)):
        load_rules(folder)


def test_an_unquoted_off_and_a_quoted_one_are_the_same_setting_in_overrides(
    tmp_path: Path,
) -> None:
    from webhook.rulecli.commands import conflicts

    text = (
        "overrides:\n"
        "  - {name: a, namespaces: [lab], rules: {gpu-shm: {mode: off}}}\n"
        '  - {name: b, namespaces: [lab], rules: {gpu-shm: {mode: "off"}}}\n'
    )
    assert conflicts(load_rules(_folder(tmp_path, **{"a.yaml": text}))) == []


# --- an override's settings together with the rules it is laid over -------------------------


def test_an_override_is_checked_against_the_rules_it_is_laid_over(tmp_path: Path) -> None:
    base = "rules:\n  gpu-shm: {minSize: 256Mi, maxSize: 2Gi}\n"
    fits = "overrides:\n  - name: small\n    namespaces: [lab]\n    rules:\n" + (
        "      gpu-shm: {maxSize: 512Mi}\n"  # below the built-in minSize, above this base's
    )
    rules = load_rules(_folder(tmp_path, **{"a.yaml": base, "b.yaml": fits}))
    assert resolve.resolve(rules, "lab").rules.rules.gpu_shm.max_size == "512Mi"
    (tmp_path / "c.yaml").write_text(
        "overrides:\n  - name: big\n    namespaces: [ml]\n    rules:\n"
        "      gpu-shm: {minSize: 4Gi}\n"
    )
    with pytest.raises(RuleFileError) as err:
        load_rules(tmp_path)
    assert err.value.problems == [
        f"{tmp_path}/c.yaml:5:26: overrides.1.rules.gpu-shm.minSize: minSize 4Gi is larger than "
        "maxSize 2Gi. Fix: lower minSize or raise maxSize"
    ]


def test_two_overrides_that_cross_in_one_namespace_keep_the_cap_and_say_so(
    tmp_path: Path,
) -> None:
    from webhook.engine.compiled import compile_rules

    text = (
        "overrides:\n"
        "  - {name: a, namespaces: [ml], rules: {gpu-shm: {minSize: 4Gi}}}\n"
        "  - {name: b, namespaces: ['ml*'], rules: {gpu-shm: {maxSize: 2Gi}}}\n"
    )
    # Named in the overrides, the namespace where they cross is seen at load: refused there.
    with pytest.raises(RuleFileError, match=r"a\.yaml:3:\d+: overrides\.1\.rules\.gpu-shm"):
        load_rules(_folder(tmp_path, **{"a.yaml": text}))
    # Where the loader cannot see them meet (a namespace only the cluster has), the cap holds.
    rules = RuleSet.model_validate(yaml.safe_load(text))
    resolved = resolve.resolve(rules, "ml")
    shm = resolved.rules.rules.gpu_shm
    assert (shm.min_size, shm.max_size) == ("2Gi", "2Gi")
    assert resolved.conflicts == (
        "gpu-shm.minSize 4Gi (override 'a') is above gpu-shm.maxSize 2Gi (override 'b') for "
        "namespace ml; maxSize holds",
    )
    # A review in that namespace is judged with the cap, not failed.
    in_force = compile_rules(rules).for_namespace("ml", None).ruleset
    assert in_force.rules.gpu_shm.min_size == "2Gi"
