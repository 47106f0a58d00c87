"""The shipped rules load, and a broken rule folder is refused with the file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.ruleset.files import RuleFileError, load_rules
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
        "a.yaml:3: rules.gpu-shm.maxSise: Extra inputs are not permitted; expected one of: "
        "mutate, volumeName, memoryFraction, minSize, maxSize, defaultSize",
    ),
    "unknown rule": ("rules:\n  gpu-shmm: {}\n", "a.yaml:2: rules.gpu-shmm"),
    "wrong mode": (
        "rules:\n  privileged-gpu:\n    mode: deny\n",
        "a.yaml:3: rules.privileged-gpu.mode: Input should be 'enforce', 'warn', 'audit' or 'off'",
    ),
    "wrong type": ("rules:\n  gpu-shm:\n    memoryFraction: half\n", "a.yaml:3: rules.gpu-shm"),
    "bad quantity": ("rules:\n  gpu-shm:\n    minSize: lots\n", "a.yaml:3: rules.gpu-shm.minSize"),
    "min above max": ("rules:\n  gpu-shm:\n    minSize: 32Gi\n", "larger than maxSize"),
    "bad selector": (
        "exemptions:\n  podSelector:\n    matchExpressions:\n      - {key: a, operator: In}\n",
        "a.yaml:4: exemptions.podSelector.matchExpressions.0: Value error, operator In needs",
    ),
    "override typo": (
        "overrides:\n  - name: x\n    namespaces: [a]\n    rules:\n      gpu-shm: {maxSise: 1Gi}\n",
        "a.yaml:2: overrides.0: Value error, rules.gpu-shm.maxSise: Extra inputs",
    ),
    "override selects nothing": (
        "overrides:\n  - name: x\n    rules: {}\n",
        "a.yaml:2: overrides.0: Value error, an override needs namespaces or a namespaceSelector",
    ),
    "duplicate override": (
        "overrides:\n  - {name: x, namespaces: [a], rules: {}}\n"
        "  - {name: x, namespaces: [b], rules: {}}\n",
        "a.yaml:1: overrides: Value error, override names must be unique: x",
    ),
    "not yaml": ("rules: [unclosed\n", "a.yaml"),
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


def test_a_rule_set_twice_in_two_files_is_refused(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        **{
            "a.yaml": "rules:\n  gpu-shm:\n    maxSize: 4Gi\n",
            "b.yaml": "rules:\n  gpu-shm:\n    maxSize: 8Gi\n",
        },
    )
    with pytest.raises(
        RuleFileError, match=r"b\.yaml:2: rules\.gpu-shm is already set in .*a\.yaml"
    ):
        load_rules(folder)
