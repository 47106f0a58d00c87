"""Every compiled value's hand-written `__init__` matches its dataclass fields.

The dataclasses of the compiled modules declared `init=False` carry an `__init__` written out
by hand ("Compiled values", docs/development.md), which `dataclasses.replace` calls with every
`__init__` field by name. This reads the sources (always in the repository, whichever build
the suite runs against; a compiled `__init__` has no signature to inspect) and holds each
`__init__` to its fields: the same names in the same order, the same defaults (`None` for a
`default_factory`), every field set, a `field(init=False)` one to its default. The classes
as imported (compiled or not) are checked to declare the fields the sources show, and a
`replace` on real values to keep every field.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def compiled_modules() -> list[str]:
    """The module paths setup.py compiles (its `COMPILED` list), read without running it."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "COMPILED"
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return [str(v) for v in value]
    raise AssertionError("setup.py has no COMPILED list")


@dataclass
class Field:
    name: str
    default: ast.expr | None  # None: no default
    factory: bool  # default_factory=...
    init: bool  # False: field(init=False), not an __init__ parameter


def _is_init_false_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        if (
            isinstance(deco, ast.Call)
            and isinstance(deco.func, ast.Name)
            and deco.func.id == "dataclass"
        ):
            return any(
                k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in deco.keywords
            )
    return False


def _fields(cls: ast.ClassDef) -> list[Field]:
    out = []
    for stmt in cls.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        if "ClassVar" in ast.unparse(stmt.annotation):
            continue
        value = stmt.value
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "field"
        ):
            kw = {k.arg: k.value for k in value.keywords}
            init = kw.get("init")
            out.append(
                Field(
                    stmt.target.id,
                    kw.get("default"),
                    "default_factory" in kw,
                    not (isinstance(init, ast.Constant) and init.value is False),
                )
            )
        else:
            out.append(Field(stmt.target.id, value, False, True))
    return out


def _same(a: ast.expr, b: ast.expr) -> bool:
    return ast.dump(a) == ast.dump(b)


def _assigned(init: ast.FunctionDef) -> dict[str, ast.expr]:
    """`self.<name> = <value>` anywhere in the body: the last value each name is given."""
    out: dict[str, ast.expr] = {}
    for node in ast.walk(init):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and node.value is not None
                ):
                    out[t.attr] = node.value
    return out


def problems(cls: ast.ClassDef) -> list[str]:
    """What is wrong with an `init=False` dataclass's hand-written `__init__` (none: empty)."""
    name = cls.name
    fields = _fields(cls)
    init = next(
        (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
    )
    if init is None:
        return [f"{name}: init=False but no __init__ written out"]
    args = init.args
    if args.vararg or args.kwarg:
        return [f"{name}.__init__ takes *args or **kwargs: it must name each field"]
    params = [*args.posonlyargs, *args.args][1:]  # without self
    defaults: list[ast.expr | None] = [None] * (len(params) - len(args.defaults)) + list(
        args.defaults
    )
    params += args.kwonlyargs
    defaults += list(args.kw_defaults)
    out = []
    wanted = [f for f in fields if f.init]
    if [p.arg for p in params] != [f.name for f in wanted]:
        out.append(
            f"{name}.__init__ takes ({', '.join(p.arg for p in params)}), its fields are "
            f"({', '.join(f.name for f in wanted)})"
        )
    by_name = {p.arg: d for p, d in zip(params, defaults, strict=True)}
    for f in wanted:
        if f.name not in by_name:
            continue
        given = by_name[f.name]
        if f.factory:
            if not (isinstance(given, ast.Constant) and given.value is None):
                out.append(f"{name}.{f.name}: a default_factory field defaults to None")
        elif f.default is None:
            if given is not None:
                out.append(f"{name}.{f.name}: the field has no default, __init__ gives one")
        elif given is None or not _same(given, f.default):
            shown = "none" if given is None else ast.unparse(given)
            out.append(
                f"{name}.{f.name}: the field defaults to {ast.unparse(f.default)}, "
                f"__init__ to {shown}"
            )
    set_ = _assigned(init)
    for f in fields:
        if f.name not in set_:
            out.append(f"{name}.__init__ never sets {f.name}")
        elif not f.init and f.default is not None and not _same(set_[f.name], f.default):
            out.append(
                f"{name}.{f.name} (not an __init__ field) starts at "
                f"{ast.unparse(set_[f.name])}, not its default {ast.unparse(f.default)}"
            )
    return out


def init_false_dataclasses() -> list[tuple[str, ast.ClassDef]]:
    """(module, class) for every `init=False` dataclass of the compiled modules."""
    out = []
    for path in compiled_modules():
        module = path.removesuffix(".py").replace("/", ".")
        tree = ast.parse((REPO / path).read_text())
        out += [
            (module, node)
            for node in tree.body
            if isinstance(node, ast.ClassDef) and _is_init_false_dataclass(node)
        ]
    return out


VALUES = init_false_dataclasses()
# Known mismatches, each failing until its class is fixed (then strict xfail fails: drop it).
KNOWN: dict[str, str] = {}


def _cases() -> list[object]:
    out: list[object] = []
    for module, cls in VALUES:
        name = f"{module}.{cls.name}"
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN[name])] if name in KNOWN else []
        out.append(pytest.param(module, cls, id=name, marks=marks))
    return out


def test_the_compiled_values_are_found() -> None:
    """The scan sees the values the engine builds per review (an empty scan proves nothing)."""
    names = {f"{m}.{c.name}" for m, c in VALUES}
    for known in (
        "webhook.engine.subject.Subject",
        "webhook.engine.views.PodView",
        "webhook.engine.views.ContainerView",
        "webhook.engine.findings.Finding",
        "webhook.engine.decision.Decision",
        "webhook.facts.model.Facts",
        "webhook.facts.model.Usage",
        "webhook.facts.dra.DraFacts",
    ):
        assert known in names
    assert len(VALUES) >= 16


@pytest.mark.parametrize(("module", "cls"), _cases())
def test_init_matches_the_fields(module: str, cls: ast.ClassDef) -> None:
    assert problems(cls) == []


@pytest.mark.parametrize(("module", "cls"), VALUES, ids=[f"{m}.{c.name}" for m, c in VALUES])
def test_the_class_as_imported_declares_those_fields(module: str, cls: ast.ClassDef) -> None:
    """The build under test (compiled or not) has the fields the source declares, so the
    check above holds for what runs."""
    imported = getattr(importlib.import_module(module), cls.name)
    declared = [(f.name, f.init) for f in _fields(cls)]
    assert [(f.name, f.init) for f in dataclasses.fields(imported)] == declared


def test_replace_keeps_every_field() -> None:
    """`dataclasses.replace` on values the engine built: it calls the hand-written __init__
    with every field by name, and the copy differs only where asked."""
    from webhook.engine.admit import Decided, Request, admit
    from webhook.engine.compiled import compile_rules
    from webhook.ruleset.files import load_rules

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ]
        },
    }
    out = admit(Request(obj=pod), compile_rules(load_rules(REPO / "rules")))
    assert isinstance(out, Decided) and out.subject is not None
    subject = out.subject
    copy = dataclasses.replace(subject, name="q")
    for f in dataclasses.fields(subject):
        want = "q" if f.name == "name" else getattr(subject, f.name)
        assert getattr(copy, f.name) == want, f.name
    decision = out.decision
    assert decision.judged or decision.patch  # a GPU pod under the shipped rules
    again = dataclasses.replace(decision)
    assert [getattr(again, f.name) for f in dataclasses.fields(decision)] == [
        getattr(decision, f.name) for f in dataclasses.fields(decision)
    ]


BROKEN = {
    "a field with no parameter": (
        """
@dataclass(slots=True, init=False)
class V:
    a: int
    b: str = ""
    def __init__(self, a: int) -> None:
        self.a = a
        self.b = ""
""",
        "V.__init__ takes (a), its fields are (a, b)",
    ),
    "parameters out of order": (
        """
@dataclass(slots=True, init=False)
class V:
    a: int
    b: int
    def __init__(self, b: int, a: int) -> None:
        self.a = a
        self.b = b
""",
        "V.__init__ takes (b, a), its fields are (a, b)",
    ),
    "another default": (
        """
@dataclass(slots=True, init=False)
class V:
    a: str = "CREATE"
    def __init__(self, a: str = "UPDATE") -> None:
        self.a = a
""",
        "V.a: the field defaults to 'CREATE', __init__ to 'UPDATE'",
    ),
    "a default the field lacks": (
        """
@dataclass(init=False)
class V:
    a: int
    def __init__(self, a: int = 0) -> None:
        self.a = a
""",
        "V.a: the field has no default, __init__ gives one",
    ),
    "a field never set": (
        """
@dataclass(slots=True, init=False)
class V:
    a: int
    b: int = 0
    def __init__(self, a: int, b: int = 0) -> None:
        self.a = a
""",
        "V.__init__ never sets b",
    ),
    "a cache not reset": (
        """
@dataclass(slots=True, init=False)
class V:
    a: int
    cached: int | None = field(default=None, init=False)
    def __init__(self, a: int) -> None:
        self.a = a
        self.cached = a
""",
        "V.cached (not an __init__ field) starts at a, not its default None",
    ),
    "a factory default not None": (
        """
@dataclass(slots=True, init=False)
class V:
    a: dict = field(default_factory=dict)
    def __init__(self, a: dict = {}) -> None:
        self.a = a
""",
        "V.a: a default_factory field defaults to None",
    ),
    "no __init__": (
        """
@dataclass(slots=True, init=False)
class V:
    a: int
""",
        "V: init=False but no __init__ written out",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_mismatch_is_reported(case: str) -> None:
    source, expected = BROKEN[case]
    cls = ast.parse(source).body[0]
    assert isinstance(cls, ast.ClassDef) and _is_init_false_dataclass(cls)
    assert expected in problems(cls)


def test_a_matching_init_passes() -> None:
    cls = ast.parse(
        """
@dataclass(slots=True, init=False)
class V:
    a: int
    b: str = ""
    c: dict = field(default_factory=dict)
    cached: int | None = field(default=None, init=False)
    def __init__(self, a: int, b: str = "", c: dict | None = None) -> None:
        self.a = a
        self.b = b
        self.c = c if c is not None else {}
        self.cached = None
"""
    ).body[0]
    assert isinstance(cls, ast.ClassDef)
    assert problems(cls) == []
