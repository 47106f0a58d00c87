"""The shipped rules load, and a broken rule folder is refused with the file and field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.ruleset import files, resolve
from webhook.ruleset.files import RuleFileError, load_rules, load_rules_with_sources
from webhook.ruleset.models import RuleSet

ROOT = Path(__file__).resolve().parent.parent


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


BROKEN = {
    "typo in a field": (
        "rules:\n  gpu-shm:\n    maxSise: 4Gi\n",
        "a.yaml:3: rules.gpu-shm.maxSise: unknown key; expected one of: "
        "mutate, mode, volumeName, memoryFraction, minSize, maxSize, defaultSize",
    ),
    "unknown rule": ("rules:\n  gpu-shmm: {}\n", "a.yaml:2: rules.gpu-shmm"),
    "wrong mode": (
        "rules:\n  privileged-gpu:\n    mode: deny\n",
        "a.yaml:3: rules.privileged-gpu.mode: 'deny' is not one of: enforce, warn, audit, off",
    ),
    "wrong type": (
        "rules:\n  gpu-shm:\n    memoryFraction: half\n",
        "a.yaml:3: rules.gpu-shm.memoryFraction: expected a number, found 'half'",
    ),
    "bad quantity": ("rules:\n  gpu-shm:\n    minSize: lots\n", "a.yaml:3: rules.gpu-shm.minSize"),
    "min above max": ("rules:\n  gpu-shm:\n    minSize: 32Gi\n", "larger than maxSize"),
    "bad selector": (
        "exemptions:\n  podSelector:\n    matchExpressions:\n      - {key: a, operator: In}\n",
        "a.yaml:4: exemptions.podSelector.matchExpressions.0: operator In needs",
    ),
    "override typo": (
        "overrides:\n  - name: x\n    namespaces: [a]\n    rules:\n      gpu-shm: {maxSise: 1Gi}\n",
        "a.yaml:2: overrides.0: rules.gpu-shm.maxSise: unknown key; expected one of: mutate,",
    ),
    "override selects nothing": (
        "overrides:\n  - name: x\n    rules: {}\n",
        "a.yaml:2: overrides.0: an override needs namespaces or a namespaceSelector",
    ),
    "duplicate override": (
        "overrides:\n  - {name: x, namespaces: [a], rules: {}}\n"
        "  - {name: x, namespaces: [b], rules: {}}\n",
        "a.yaml:1: overrides: override names must be unique: x",
    ),
    "not yaml": ("rules: [unclosed\n", "a.yaml:2:1: not valid YAML ("),
    "negative budget": (
        "rules:\n  gpu-quota:\n    budgets:\n      - name: a\n        namespaces: [a]\n"
        "        limits: {nvidia.com/gpu: -2}\n",
        "a.yaml:6: rules.gpu-quota.budgets.0.limits.nvidia.com/gpu: must be more than 0, found -2",
    ),
    "zero product budget": (
        "rules:\n  gpu-quota:\n    budgets:\n      - name: a\n        namespaces: [a]\n"
        "        products: {H100: {nvidia.com/gpu: 0}}\n",
        "rules.gpu-quota.budgets.0.products.H100.nvidia.com/gpu: must be more than 0, found 0",
    ),
    "missing setting": (
        "overrides:\n  - {namespaces: [a], rules: {}}\n",
        "a.yaml:2: overrides.0.name: required",
    ),
    "not a mapping": ("- 1\n- 2\n", "a.yaml:1: expected a mapping"),
}


@pytest.mark.parametrize("text,expected", BROKEN.values(), ids=BROKEN.keys())
def test_a_broken_rule_file_is_refused_naming_file_and_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    folder = _folder(tmp_path, **{"a.yaml": text})
    with pytest.raises(RuleFileError) as err:
        load_rules(folder)
    assert expected in str(err.value)
    assert "a.yaml" in str(err.value)


def test_every_problem_is_listed_by_file_then_line(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        **{
            "a.yaml": "rules:\n  gpu-shm:\n    maxSise: 4Gi\n  privileged-gpu: {mode: deny}\n",
            "b.yaml": "mode: nope\nrules:\n  gpu-shm: {minSise: 1Gi}\n",
        },
    )
    with pytest.raises(RuleFileError) as err:
        load_rules(folder)
    where = [p.split(": ", 1)[0].rsplit("/", 1)[-1] for p in err.value.problems]
    assert where == ["a.yaml:3", "a.yaml:4", "b.yaml:1", "b.yaml:3"]


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
    with pytest.raises(RuleFileError, match=r"a\.yaml: not UTF-8 text \(byte 6 "):
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
    assert loaded.lines[("rules", "gpu-shm", "maxSize")].endswith("b.yaml:3")
    assert loaded.lines[("rules", "gpu-shm", "minSize")].endswith("a.yaml:4")


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
    assert loaded.lines[("overrides", 0, "namespaces")].endswith("b.yaml:3")
    assert loaded.lines[("overrides", 1, "namespaces")].endswith("a.yaml:6")


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
    assert f'maxSize: "32Gi"    # {folder / "team.yaml"}:3' in shown


# --- rule files are read with bounded work -------------------------------------------------

BILLION_LAUGHS = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    + ["rules: {gpu-shm: {maxSize: *i}}"]
)

REFUSED = {
    "alias bomb": (BILLION_LAUGHS, "a.yaml:1: YAML anchor &a is not allowed in rule files"),
    "alias": (
        "rules:\n  gpu-shm: {maxSize: 4Gi}\n  visible-devices: *x\n",
        "a.yaml:3: YAML alias *x is not allowed",
    ),
    "merge key": (
        "rules:\n  gpu-shm:\n    <<: {maxSize: 4Gi}\n",
        "a.yaml:3: YAML merge keys (<<) are not allowed",
    ),
    "python tag": ("mode: !!python/object:os.system x\n", "a.yaml:1: the YAML tag"),
    "set tag": ("gpuResources: !!set {a: null}\n", "a.yaml:1: the YAML tag tag:yaml.org,2002:set"),
    "bad int": ("cluster:\n  maxStalenessSeconds: !!int lots\n", "a.yaml:2: 'lots' is not a valid"),
    "impossible date": ("mode: 2024-13-45\n", "a.yaml:1: '2024-13-45' is not a valid"),
    "mapping as key": ("? [a]\n: b\n", "a.yaml:1: a mapping key must be a plain value"),
    "deep nesting": ("[" * 100_000 + "]" * 100_000, "a.yaml:1: nested deeper than 64 levels"),
    "past libyaml 6.0.4's cap": ("a:\n" + "[" * 1_001, "a.yaml:2: nested deeper than 64 levels"),
    "deep block nesting": (
        "".join(" " * i + f"k{i}:\n" for i in range(1_500)),
        "a.yaml:65: nested deeper than 64 levels",
    ),
    "compact sequences": ("rules:\n  " + "- " * 1_500, "a.yaml:2: nested deeper than 64 levels"),
}


@pytest.mark.parametrize("text,expected", REFUSED.values(), ids=REFUSED.keys())
def test_yaml_that_could_cost_without_bound_is_refused_naming_the_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    folder = _folder(tmp_path, **{"a.yaml": text})
    with pytest.raises(RuleFileError) as err:
        load_rules(folder)
    assert expected in str(err.value)
    assert str(tmp_path / "a.yaml") in str(err.value)


def test_a_rule_file_over_the_size_limit_is_refused_without_reading_it_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 2**20)
    folder = _folder(tmp_path, **{"a.yaml": "mode: enforce\n" + "#" * 2**20})
    with pytest.raises(RuleFileError, match=r"a\.yaml:1: larger than 1 MiB"):
        load_rules(folder)


def test_the_reader_agrees_with_safe_load_on_values_and_lines(tmp_path: Path) -> None:
    """One pass over the parser's events gives what safe_load gave, with the same lines."""
    text = (
        "mode: warn\n"
        "cluster: {maxStalenessSeconds: 0x10}\n"
        "gpuResources: ['nvidia.com/gpu', \"amd.com/gpu\"]\n"
        "rules:\n"
        "  gpu-shm:\n"
        "    memoryFraction: 0.25\n"
        "    mutate: no\n"
        "---\n"
        "overrides:\n"
        "  - name: ml\n"
        "    namespaces: [ml]\n"
        "    rules: {gpu-shm: {maxSize: 4Gi}}\n"
    )
    folder = _folder(tmp_path, **{"a.yaml": text})
    loaded = load_rules_with_sources(folder)
    assert loaded.rules.cluster.max_staleness_seconds == 16
    assert loaded.rules.rules.gpu_shm.memory_fraction == 0.25
    assert loaded.rules.rules.gpu_shm.mutate is False
    assert loaded.rules.overrides[0].rules == {"gpu-shm": {"maxSize": "4Gi"}}
    where = str(tmp_path / "a.yaml")
    assert loaded.lines[("rules", "gpu-shm", "mutate")] == f"{where}:7"
    assert loaded.lines[("gpuResources", 1)] == f"{where}:3"
    assert loaded.lines[("overrides", 0, "rules", "gpu-shm", "maxSize")] == f"{where}:12"
    assert [d for d, _, _ in files._documents(text, "x")] == list(yaml.safe_load_all(text))


def _overrides(count: int) -> dict[str, Any]:
    """A big platform's overrides: mostly named namespaces, some patterns and selectors."""
    out = []
    for i in range(count):
        o: dict[str, Any] = {"name": f"o{i}", "rules": {"gpu-shm": {"maxSize": f"{1 + i % 8}Gi"}}}
        if i % 10 == 8:
            o["namespaces"] = [f"team-{i}-*"]
        elif i % 10 == 9:
            o["namespaceSelector"] = {"matchLabels": {"team": f"t{i}"}}
        else:
            o["namespaces"] = [f"team-{i}", f"team-{i}-dev"]
        out.append(o)
    return {"overrides": out}


def test_finding_a_namespaces_overrides_does_not_walk_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Linear reloads and O(1)-ish first requests: the namespace tests that run for one
    namespace do not grow with the number of overrides that name other namespaces."""
    tested: list[int] = []
    real = resolve.OverrideMatcher.applies

    def counting(self: resolve.OverrideMatcher, *args: Any) -> bool:
        tested.append(1)
        return real(self, *args)

    monkeypatch.setattr(resolve.OverrideMatcher, "applies", counting)
    for count in (100, 2000):
        ruleset = RuleSet.model_validate(_overrides(count))
        compiled = resolve.matchers(ruleset)
        tested.clear()
        shape = resolve.applicable(ruleset, compiled, "team-50-dev", {"team": "t59"})
        # team-50 and team-50-dev by name, team-5*-* no (team-58-*: no), t59 by selector
        assert [ruleset.overrides[i].name for i in shape] == ["o59", "o50"]
        assert len(tested) <= 4, (count, len(tested))
    # The plain walk still agrees, override for override.
    assert shape == resolve.applicable(ruleset, tuple(compiled), "team-50-dev", {"team": "t59"})


def test_pattern_overrides_are_found_by_their_literal_prefix() -> None:
    ruleset = RuleSet.model_validate(
        {
            "overrides": [
                {"name": "all", "namespaces": ["*"], "rules": {}},
                {"name": "team", "namespaces": ["team-*"], "rules": {}},
                {"name": "other", "namespaces": ["web-*"], "rules": {}},
                {"name": "exact", "namespaces": ["team-a"], "rules": {}},
                {"name": "mixed", "namespaces": ["x", "team-?"], "rules": {}},
                {
                    "name": "expr",
                    "namespaceSelector": {
                        "matchExpressions": [{"key": "gpu", "operator": "Exists"}]
                    },
                    "rules": {},
                },
            ]
        }
    )
    compiled = resolve.matchers(ruleset)
    for namespace, labels in (("team-a", {"gpu": "1"}), ("web-1", None), ("zzz", {})):
        fast = resolve.applicable(ruleset, compiled, namespace, labels)
        assert fast == resolve.applicable(ruleset, tuple(compiled), namespace, labels)
    names = [
        ruleset.overrides[i].name
        for i in resolve.applicable(ruleset, compiled, "team-a", {"gpu": "1"})
    ]
    assert names == ["expr", "all", "team", "mixed", "exact"]


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
