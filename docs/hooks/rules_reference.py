"""The rules reference page, generated when the site is built.

Every setting a rule file may hold comes from `schema/rules.schema.json` (itself generated from
the rule-set models), every rule's purpose from `webhook.audit.ruledocs`, and the built-in name
lists from `webhook.ruleset.defaults`: nothing is written down twice, so the page cannot fall
behind the code. `mkdocs build` calls `on_files`; `render()` is what tests read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "schema" / "rules.schema.json"
SHIPPED = ROOT / "rules" / "gpu-admission.yaml"
PAGE = "rules-reference.md"

# The $defs that hold one rule's settings are shown under that rule, not again below.
_RULES_DEF = "RuleSettings"


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _anchor(name: str) -> str:
    return name.lower()


def _type(prop: dict[str, Any]) -> str:
    """A JSON Schema type in a few words, with links to the nested settings it names."""
    if "$ref" in prop:
        name = _ref_name(prop["$ref"])
        if name == _RULES_DEF:
            return "[one entry per rule id](#rules)"
        return f"[{name}](#{_anchor(name)})"
    if "enum" in prop:
        return " | ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " or ".join(_type(p) for p in prop[key])
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object":
        values = prop.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"map of {_type(values)}"
        return "map"
    if kind == "null":
        return "null"
    return str(kind or "any")


def _constraints(prop: dict[str, Any]) -> str:
    words = []
    for key, say in (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
    ):
        if key in prop:
            words.append(f"{say} {prop[key]}")
    if "pattern" in prop:
        words.append(f"matches `{prop['pattern']}`")
    return ", ".join(words)


def _default(prop: dict[str, Any]) -> str:
    if "default" not in prop:
        return ""
    value = prop["default"]
    if value == [] or value == {}:
        return "empty"
    text = json.dumps(value, ensure_ascii=False)
    return f"`{text}`" if len(text) <= 80 else f"`{text[:77]}...`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_KEY = re.compile(r"^#( +)([A-Za-z][A-Za-z0-9-]*):( |$)")


def shipped_blocks(text: str, known: set[str]) -> dict[str, list[str]]:
    """The shipped rule file's commented blocks (its words and the default values), by the key
    each documents (`known`: top-level keys by name, rules as `rules.<id>`), uncommented for
    display. A block documenting several keys is shown under each."""
    blocks: dict[str, list[str]] = {}
    chunk: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.strip() and line != "# rules:":
            chunk.append(line)
            continue
        keyed = []
        for i, m in enumerate(map(_KEY.match, chunk)):
            if m:
                name = m[2] if len(m[1]) == 1 else f"rules.{m[2]}"
                if name in known:
                    keyed.append((i, len(m[1]), name))
        if keyed:
            indent = min(k[1] for k in keyed)
            start = min(k[0] for k in keyed)
            # Words before the first key stay comments; from it on, the commented YAML.
            shown = chunk[:start] + [ln[2:] if ln.startswith("# ") else ln for ln in chunk[start:]]
            if indent > 1:
                shown = ["rules:", *shown]
            for _, level, name in keyed:
                if level == indent:
                    blocks.setdefault(name, shown)
        chunk = []
    return blocks


def _example(lines: list[str] | None) -> list[str]:
    if not lines:
        return []
    return [
        "In the shipped `rules/gpu-admission.yaml`, which documents every setting:",
        "",
        "```yaml",
        *lines,
        "```",
        "",
    ]


def _fields_table(definition: dict[str, Any]) -> list[str]:
    props: dict[str, dict[str, Any]] = definition.get("properties", {})
    if not props:
        return ["(no settings)", ""]
    required = set(definition.get("required", []))
    lines = [
        "| field | type | default | description |",
        "| --- | --- | --- | --- |",
    ]
    for name, prop in props.items():
        about = prop.get("description", "")
        limits = _constraints(prop)
        if limits:
            about = f"{about} ({limits})" if about else limits
        if name in required:
            about = f"**required.** {about}".strip()
        lines.append(
            f"| `{name}` | {_cell(_type(prop))} | {_cell(_default(prop))} | {_cell(about)} |"
        )
    lines.append("")
    return lines


def _own_pods(accounts: tuple[str, ...], daemonsets: tuple[str, ...]) -> str:
    """A component's own pods, for the built-in exemptions table."""
    parts = []
    if accounts:
        parts.append("service accounts " + ", ".join(f"`{a}`" for a in accounts))
    if daemonsets:
        parts.append("pods of DaemonSets " + ", ".join(f"`{d}`" for d in daemonsets))
    return "; ".join(parts) or "none (not established from its charts: judged like any pod)"


def render(schema: dict[str, Any] | None = None) -> str:
    """The page's markdown."""
    from webhook.audit.ruledocs import rule_doc
    from webhook.ruleset.components import CLUSTER_NAMESPACES, COMPONENTS
    from webhook.ruleset.defaults import DEFAULT_GPU_RESOURCES
    from webhook.ruleset.hostpaths import HOST_PATHS, KINDS, VENDOR_PATHS

    if schema is None:
        schema = json.loads(SCHEMA.read_text())
    defs: dict[str, dict[str, Any]] = schema["$defs"]
    rules: dict[str, dict[str, Any]] = defs[_RULES_DEF]["properties"]
    rule_defs = {_ref_name(p["$ref"]) for p in rules.values() if "$ref" in p}
    known = {*schema["properties"], *(f"rules.{rule}" for rule in rules)}
    shipped = shipped_blocks(SHIPPED.read_text(), known)

    out = [
        "# Rules reference",
        "",
        "Every setting a rule file may hold, with its type and built-in default. This page is",
        "generated from `schema/rules.schema.json` (the JSON Schema of rule files, which",
        "`gpu-admission rules schema` writes from the rule-set models) and the package's",
        "built-in lists each time the site is built. [Writing rules](writing-rules.md) says",
        "how files are laid over each other; `rules/gpu-admission.yaml` shows every setting",
        "with a comment.",
        "",
        "Modes: `enforce` (deny), `warn` (allow, kubectl shows a warning), `audit` (allow,",
        "record in audit annotations and the decision log), `off`.",
        "",
        "## Top level",
        "",
        *_fields_table(schema),
    ]
    for key in schema["properties"]:
        if key != "rules" and key in shipped:
            out += [f"### `{key}`", "", *_example(shipped[key])]
    out += [
        "## Rules",
        "",
        "Under `rules:` in a rule file, one entry per rule id.",
        "",
    ]
    for rule_id, prop in rules.items():
        doc = rule_doc(rule_id)
        out += [f"### `{rule_id}`", "", f"**{doc.short}.** {doc.help}", ""]
        definition = defs[_ref_name(prop["$ref"])] if "$ref" in prop else prop
        if definition.get("description"):
            out += [definition["description"], ""]
        out += _fields_table(definition)
        out += _example(shipped.get(f"rules.{rule_id}"))

    out += ["## Nested settings", ""]
    for name, definition in defs.items():
        if name == _RULES_DEF or name in rule_defs:
            continue
        out += [f"### {name}", ""]
        if definition.get("description"):
            out += [definition["description"], ""]
        out += _fields_table(definition)

    out += [
        "## Built-in lists",
        "",
        "From `webhook/ruleset/defaults.py` and, for the built-in exemptions,",
        "`webhook/ruleset/components.py`.",
        "",
        "### GPU resources (`gpuResources`)",
        "",
        *[f"- `{name}`" for name in DEFAULT_GPU_RESOURCES],
        "",
        "### Built-in exemptions (`exemptions.builtIn`)",
        "",
        "From `webhook/ruleset/components.py`, where each entry cites the chart or manifest",
        "its names come from. Exempt whole (every cluster has them from the start):",
        "",
        *[f"- `{name}`" for name in CLUSTER_NAMESPACES],
        "",
        "In the namespaces GPU components install in, only the GPU-access rules",
        "(`visible-devices`, `privileged-gpu`, `host-gpu-devices`), and only for the",
        "component's own pods: those running under its service accounts, or made by the",
        "DaemonSet controller for its DaemonSets. Everything else is judged there as anywhere.",
        "`exemptions.namespaces` adds namespaces exempt whole; `exemptions.remove.namespaces`",
        "takes one of these away; `exemptions.builtIn: false` all of them.",
        "",
        "| Namespaces | Component | Its own pods |",
        "|---|---|---|",
        *[
            f"| {', '.join(f'`{n}`' for n in c.namespaces)} | {c.name} | "
            f"{_own_pods(c.accounts, c.daemonsets)} |"
            for c in COMPONENTS
        ],
        "",
        "### Host paths that reach GPUs (`host-gpu-devices`)",
        "",
        "From `webhook/ruleset/hostpaths.py`: the first row that matches a path decides; a",
        "path no row matches reaches nothing. `**` is the directory and everything below it,",
        "`<pid>` a process directory; `/proc/<pid>/root/<path>` is judged as `/<path>`.",
        "`host-gpu-devices.paths` adds paths to these, never removes one.",
        "",
        *[f"- `{kind}`: {_cell(text)}" for kind, text in KINDS.items()],
        "",
        "| Host path | Reaches | What is there |",
        "|---|---|---|",
        *[
            f"| `{row.pattern}` | {row.reach or 'nothing'} | {_cell(row.why)} |"
            for row in HOST_PATHS
        ],
        "",
        "Where the rule set counts these accelerators' resources as GPUs:",
        "",
        "| Resources | Host path | What is there |",
        "|---|---|---|",
        *[
            f"| {', '.join(f'`{n}`' for n in names)} | `{row.pattern}` | {_cell(row.why)} |"
            for names, rows in VENDOR_PATHS
            for row in rows
        ],
        "",
    ]
    return "\n".join(out)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated page to the site (nothing is written to docs/)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files
