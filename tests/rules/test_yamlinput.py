"""The depth check that runs before any YAML is composed: exact where it counts, and its cheap
pre-test never lets a text that nests too deep go unchecked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.yamlinput import YamlFileError, could_pass, deeper_than, read_document

scalars = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans())
trees = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(min_size=1, max_size=4), inner, max_size=3)
    ),
    max_leaves=40,
)


def _depth(value: Any) -> int:
    """Collections nested in `value`, counted as the parser's start events count them."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(
    tree=trees,
    flow=st.sampled_from([None, True, False]),
    indent=st.integers(min_value=2, max_value=9),
    line_break=st.sampled_from(["\n", "\r", "\r\n"]),
)
def test_any_dumped_tree_is_judged_by_its_true_depth(
    tree: Any, flow: bool | None, indent: int, line_break: str
) -> None:
    text = yaml.safe_dump(tree, default_flow_style=flow, indent=indent, line_break=line_break)
    depth = _depth(tree)
    for limit in range(max(depth - 2, 0), depth + 2):
        if depth > limit:
            assert could_pass(text, limit), (limit, text)
            assert deeper_than(text, limit) is not None, (limit, text)
        else:
            assert deeper_than(text, limit) is None, (limit, text)


@settings(max_examples=200, deadline=None)
@given(
    dashes=st.integers(min_value=1, max_value=60),
    separator=st.sampled_from(["- ", "? ", "- ? ", "? - "]),
    indent=st.integers(min_value=0, max_value=6),
)
def test_compact_nesting_on_one_line_is_seen(dashes: int, separator: str, indent: int) -> None:
    """Block collections opened by indicators on one line, no new line and no bracket each."""
    text = "k:\n" + " " * (indent + 1) + separator * dashes + "x\n"
    events = list(yaml.parse(text, Loader=yaml.SafeLoader))
    depth, deepest = 0, 0
    for event in events:
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            deepest = max(deepest, depth)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    assert could_pass(text, deepest - 1)
    assert deeper_than(text, deepest - 1) == 2
    assert deeper_than(text, deepest) is None


def test_a_mapping_inside_a_flow_sequence_counts_as_a_level() -> None:
    """`[a: b]` opens a sequence and a single-pair mapping with one bracket."""
    text = "a: " + "[a: " * 150 + "b" + "]" * 150
    assert could_pass(text, 250)
    assert deeper_than(text, 250) == 1


CAPS = {
    # libyaml in PyYAML 6.0.4 refuses past 1,000 levels; before, its composer crashed at ~20,000.
    "flow": ("[" * 30_000 + "]" * 30_000, 1),
    "block": ("".join(" " * i + f"k{i}:\n" for i in range(1_200)), 101),
    "compact": ("a:\n  " + "- " * 5_000 + "x\n", 2),
}


@pytest.mark.parametrize("text,line", CAPS.values(), ids=CAPS.keys())
def test_depths_past_any_libyaml_cap_are_counted_not_refused(text: str, line: int) -> None:
    assert deeper_than(text, 100) == line


def test_a_syntax_error_before_the_limit_is_left_to_the_reader() -> None:
    deep = "[" * 200 + "]" * 200
    assert deeper_than("a: b: c\n" + deep, 100) is None  # the reader names line 1's error
    assert deeper_than("a: ok\nb: " + deep + "\nc: d: e\n", 100) == 2  # depth comes first


def test_ordinary_manifests_skip_the_scan() -> None:
    pod = yaml.safe_dump(
        {"spec": {"containers": [{"name": "a", "args": ["x"] * 300, "env": [{"name": "A"}]}]}}
    )
    assert not could_pass(pod * 50, 500)


READ_ERRORS = {
    "too deep": ("a:\n  b: " + "[" * 300 + "]" * 300 + "\n", ":2: nested deeper than 200 levels"),
    "not yaml": ("a: [b\n", ":2: not valid YAML at line 2"),
    "huge integer": ("a: " + "9" * 5000 + "\n", ": holds a value that cannot be read"),
}


@pytest.mark.parametrize("text,expected", READ_ERRORS.values(), ids=READ_ERRORS.keys())
def test_a_yaml_file_that_cannot_be_read_is_named_with_its_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "facts.yaml"
    path.write_text(text)
    with pytest.raises(YamlFileError) as refused:
        read_document(path)
    assert str(refused.value).startswith(f"{path}{expected}")


def test_a_missing_or_binary_file_is_named_in_plain_words(tmp_path: Path) -> None:
    with pytest.raises(YamlFileError, match="cannot read it: no such file"):
        read_document(tmp_path / "nowhere.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(YamlFileError, match="not UTF-8 text"):
        read_document(tmp_path / "bin.yaml")
