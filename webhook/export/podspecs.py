"""Where the pod specs and containers are, as CEL: the same workload table the engine reads.

`pod_specs(table, root)` is a CEL list with one record per pod spec the engine's pod views
find in `root` (`object` or `oldObject`):

    {'ptr': JSON pointer, 'path': dotted path for messages, 'spec': the PodSpec,
     'key': key of each container's ResourceRequirements, 'lone': container-path view,
     'mutable': whether the webhook patches it, 'serving': which containers take traffic
     ('' none, 'ports', 'main': `PodView.serving`), 'labels': the pod's (template's) labels,
     only when asked for}

`containers(...)` is a CEL list with one record per container of one pod spec, in the
engine's order (init, regular, ephemeral, then the inline keys):

    {'c': container, 'path': dotted path, 'ptr': JSON pointer, 'label': 'container "x"',
     'role': ..., 'key': ..., 'mutable': ..., 'lim': limits, 'req': requests, 'asks': bool}

Every step is guarded: an object whose fields have another type than Kubernetes gives them
adds nothing here (the webhook refuses such an object as unreadable; for built-in kinds the
apiserver's own decoding already has).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from webhook.engine.fields import dotted, pointer
from webhook.engine.podviews import LWS_WORKER_INDEX
from webhook.engine.workloads import Workload, WorkloadTable
from webhook.export.cel import q, qlist
from webhook.ruleset.workloads import LIST_ITEMS, MAP_VALUES

__all__ = ["containers", "kind_test", "pod_specs"]

_WILD = (LIST_ITEMS, MAP_VALUES)


# Words CEL reserves: a field of that name is read by index (`x['namespace']`), which works
# on any map, where `x.namespace` would not even parse.
_RESERVED = frozenset({
    "as", "break", "const", "continue", "else", "false", "for", "function", "if", "import",
    "in", "let", "loop", "namespace", "null", "package", "return", "true", "var", "void",
    "while",
})  # fmt: skip


def _ident(name: str) -> bool:
    plain = name.replace("_", "a").isascii() and name.replace("_", "a").isalnum()
    return plain and not name[0].isdigit() and name not in _RESERVED


def _field(expr: str, name: str) -> str:
    return f"{expr}.{name}" if _ident(name) else f"{expr}[{q(name)}]"


def _walk(root: str, fields: Iterable[str]) -> tuple[str, list[str]]:
    """`root.a.b` and the guards that make reading it safe: each step is there and is a map
    (never null: the engine walks no further through null; `object` itself is a map)."""
    expr, guards = root, []
    for f in fields:
        guards.append(f"{q(f)} in {expr}")
        expr = _field(expr, f)
        guards.append(f"type({expr}) == map")
    return expr, guards


def kind_test(workloads: Iterable[Workload]) -> str:
    """True for requests about objects of these kinds (group and kind, as the engine keys)."""
    by_group: dict[str, list[str]] = {}
    for w in workloads:
        by_group.setdefault(w.group, []).append(w.kind)
    parts = [
        f"(request.kind.group == {q(group)} && request.kind.kind in {qlist(kinds)})"
        for group, kinds in by_group.items()
    ]
    return "(" + " || ".join(parts) + ")"


def record(fields: dict[str, str]) -> str:
    """A CEL map literal of values of different types. The apiserver type-checks aggregate
    literals as homogeneous: every value must have the first one's type, and `dyn` is a type
    of its own there ("expected type 'dyn' but found 'string'"), so every value is dyn()."""
    return "{" + ", ".join(f"{q(k)}: dyn({v})" for k, v in fields.items()) + "}"


def _record(
    spec: str,
    key: str,
    lone: bool,
    mutable: bool,
    labels: bool,
    notes: bool,
    serving: str,
    name: str = "@path",
) -> str:
    fields = {
        "spec": spec,
        "ptr": "@ptr",
        "path": "@path",
        "key": q(key),
        "lone": str(lone).lower(),
        "mutable": str(mutable).lower(),
        "serving": serving,
        "name": name,
    }
    if labels:
        fields["labels"] = "{}" if lone else "@labels"
    if notes:
        fields["notes"] = "{}" if lone else "@notes"
    return record(fields)


def _labels(parent: str | None, key: str = "labels") -> str:
    """The labels (or annotations) in the metadata beside the pod spec (a template's; a Pod's
    own), as the engine reads them: for podSelector exemptions, and for GPU-sharing
    schedulers' asks; {} where there are none."""
    if parent is None:
        return "{}"
    meta = f"{parent}.metadata"
    return (
        f"(type({parent}) == map && 'metadata' in {parent} && type({meta}) == map"
        f" && {q(key)} in {meta} && type({meta}.{key}) == map ? {meta}.{key} : {{}})"
    )


def _fill(build: str, value: str, ptr: str, path: str, parent: str | None, at: str) -> str:
    return (
        build.replace("@ptr", ptr)
        .replace("@path", path)
        .replace("@labels", _labels(parent))
        .replace("@notes", _labels(parent, "annotations"))
        .replace("@at", at)
        .replace("@v", value)
    )


def _lone_name(
    root: str, segments: tuple[str, ...], name: tuple[tuple[str, ...] | None, str], kind: str
) -> str:
    """What messages call a container-like object's container when it has no `name` of its
    own (`podviews._lone_name`): the string its controller names it by, plus the suffix; else
    the kind in lower case when it is the whole `spec`, else its path."""
    fallback = q(kind.lower()) if segments == ("spec",) else "@path"
    path, suffix = name
    if path is None:
        return fallback
    wild = next((i for i, s in enumerate(path) if s in _WILD), None)
    base, rest = (root, path) if wild is None else ("@at", path[wild + 1 :])
    parent, guards = _walk(base, rest[:-1])
    value = _field(parent, rest[-1])
    found = " && ".join([*guards, f"{q(rest[-1])} in {parent}", f"type({value}) == string"])
    return f"({found} && size({value}) > 0 ? {value} + {q(suffix)} : {fallback})"


def _serving(root: str, mode: str, workers_if: tuple[str, ...] | None, pod: bool) -> str:
    """The record's `serving` (`PodView.serving`): which containers take traffic. `@at` is
    the item the template's wildcard reached (`root` when it has none), where a `workersIf`
    sharing that wildcard is read; a Pod's labels say whether it is a LeaderWorkerSet worker."""
    if not mode:
        return "''"
    served = q(mode)
    if pod:
        index = q(LWS_WORKER_INDEX)
        served = f"({index} in @labels && @labels[{index}] != '0' ? '' : {served})"
    if workers_if is None:
        return served
    wild = next((i for i, s in enumerate(workers_if) if s in _WILD), None)
    base, rest = (root, workers_if) if wild is None else ("@at", workers_if[wild + 1 :])
    _, guards = _walk(base, rest)
    return f"({' && '.join(guards)} ? '' : {served})"


def _collect(root: str, segments: tuple[str, ...], build: str) -> str:
    """A CEL list of `build` for each pod spec (a map) the path reaches in `root`.

    `build` is a template: `@v`, `@ptr` and `@path` are replaced by CEL expressions for the
    value reached, its JSON pointer and its dotted path.
    """
    wild = next((i for i, s in enumerate(segments) if s in _WILD), None)
    if wild is None:
        value, guards = _walk(root, segments)
        parent, _ = _walk(root, segments[:-1])
        made = _fill(build, value, q(pointer(*segments)), q(dotted("", *segments)), parent, root)
        return f"({' && '.join(guards)} ? [{made}] : [])"
    head, rest = segments[:wild], segments[wild + 1 :]
    outer, guards = _walk(root, head)
    guards = guards[:-1]  # a list or a map, tested below
    ptr_tail, path_tail = pointer(*rest), dotted("x", *rest)[1:]
    base_ptr, base_path = pointer(*head), dotted("", *head)

    def each(var: str, at: str, ptr: str, path: str) -> str:
        item, inner = _walk(at, rest)
        keep = " && ".join([f"type({at}) == map", *inner])
        parent = _walk(at, rest[:-1])[0] if rest else outer
        made = _fill(build, item, ptr, path, parent, at)
        return f".filter({var}, {keep}).map({var}, {made})"

    # Either wildcard walks list items and map values alike, as the engine's `walk` does; a
    # map's keys in sorted order, so the message reads the same on every request (Go's maps
    # have no order).
    by_index = each(
        "i",
        f"{outer}[i]",
        f"{q(base_ptr + '/')} + string(i) + {q(ptr_tail)}",
        f"{q(base_path + '[')} + string(i) + {q(']' + path_tail)}",
    )
    key_path = (
        "(k.contains('.') || k.contains('/') ? '[\"' + k + '\"]' : "
        f"{q('.' if base_path else '')} + k)"
    )
    by_key = each(
        "k",
        f"{outer}[k]",
        f"{q(base_ptr + '/')} + k.replace('~', '~0').replace('/', '~1') + {q(ptr_tail)}",
        f"{q(base_path)} + {key_path} + {q(path_tail)}",
    )
    reach = " && ".join(guards) or "true"
    return (
        f"({reach} ? (type({outer}) == list ? lists.range(size({outer})){by_index}"
        f" : type({outer}) == map ? {outer}.map(k, k).sort(){by_key} : []) : [])"
    )


def pod_specs(table: WorkloadTable, root: str, *, labels: bool = False, notes: bool = False) -> str:
    """The CEL list of pod-spec records in `root`: each path once, for the kinds that have it
    (in table order, as the engine's views come); `labels`, `notes`: with the pods' labels,
    annotations."""
    paths: dict[tuple[tuple[str, ...], str, bool, bool, str, str], list[Workload]] = {}
    for w in table.kinds:
        for segments, (mode, workers_if) in zip(w.spec_paths, w.spec_serving, strict=True):
            serving = _serving(root, mode, workers_if, (w.group, w.kind) == ("", "Pod"))
            paths.setdefault((segments, "resources", False, w.mutate, serving, ""), []).append(w)
        for (segments, key), name in zip(w.container_paths, w.container_names, strict=True):
            named = _lone_name(root, segments, name, w.kind)
            paths.setdefault((segments, key, True, False, "''", named), []).append(w)
    parts = []
    for (segments, key, lone, mutable, serving, named), kinds in paths.items():
        spec = "{'containers': [@v]}" if lone else "@v"
        made = _record(spec, key, lone, mutable, labels, notes, serving, named or "@path")
        parts.append(f"({kind_test(kinds)}\n    ? {_collect(root, segments, made)} : [])")
    # A list of lists, flattened: `a + b + c...` would nest one level per path.
    return "[\n  " + ",\n  ".join(parts) + "\n].flatten()" if parts else "[]"


def _label(kind: str, name_of: str, fallback: str) -> str:
    name = f"(has({name_of}.name) && type({name_of}.name) == string ? {name_of}.name : {fallback})"
    return f"{q(kind + ' ')} + '\"' + {name} + '\"'"


def _res(c: str, key: str) -> str:
    """The container's ResourceRequirements (`key` is a CEL string), or {} where it has none
    readable."""
    return f"({key} in {c} && type({c}[{key}]) == map ? {c}[{key}] : {{}})"


def _amounts(res: str, section: str) -> str:
    return f"({q(section)} in {res} && type({res}.{section}) == map ? {res}.{section} : {{}})"


def _listed(s: str, list_name: str) -> str:
    """The CEL list of records of the containers in one list of the pod spec of record `s`,
    each labelled and pointed at as a message names it: an init container that restarts
    Always is a sidecar; a container-like object standing alone (`lone`) is named by itself."""
    spec = f"{s}.spec"
    items = f"{spec}.{list_name}"
    c = f"{items}[i]"
    if list_name == "initContainers":
        sidecar = f"has({c}.restartPolicy) && {c}.restartPolicy == 'Always'"
        label = (
            f"({sidecar} ? {_label('sidecar container', c, 'string(i)')}"
            f" : {_label('init container', c, 'string(i)')})"
        )
        role = f"({sidecar} ? 'sidecar' : 'init')"
    elif list_name == "containers":
        label = (
            f"({s}.lone ? {_label('container', c, f'{s}.name')}"
            f" : {_label('container', c, 'string(i)')})"
        )
        role = "'main'"
    else:
        label = _label("ephemeral container", c, "string(i)")
        role = "'ephemeral'"
    path = f"({s}.lone ? {s}.path : {s}.path + {q('.' + list_name + '[')} + string(i) + ']')"
    ptr = f"({s}.lone ? {s}.ptr : {s}.ptr + {q('/' + list_name + '/')} + string(i))"
    made = record(
        {
            "c": c,
            "path": path,
            "ptr": ptr,
            "label": label,
            "role": role,
            "res": _res(c, s + ".key"),
        }
    )
    return (
        f"({q(list_name)} in {spec} && type({items}) == list"
        f" ? lists.range(size({items})).filter(i, type({c}) == map).map(i, {made}) : [])"
    )


def _inline(s: str, keys: list[str]) -> str:
    """The CEL list of records of the containers a pod spec holds under its own keys (the
    inline keys of a container-like object), each a main container named by its key."""
    spec = f"{s}.spec"
    c = f"{spec}[k]"
    made = record(
        {
            "c": c,
            "path": f"{s}.path + '.' + k",
            "ptr": f"{s}.ptr + '/' + k",
            "label": _label("container", c, "k"),
            "role": "'main'",
            "res": _res(c, s + ".key"),
        }
    )
    return f"{qlist(keys)}.filter(k, k in {spec} && type({c}) == map).map(k, {made})"


def containers(
    s: str,
    inline: Iterable[str],
    asks: Callable[[str], str],
    shared: Callable[[str], str] | None = None,
) -> str:
    """The CEL list of container records of the pod-spec record `s`.

    `ptr` is its JSON pointer; `role` is init, sidecar, main or ephemeral; `lim` and `req` are
    its limits and requests (every resource, as written); `key` and `mutable` come from the pod
    spec's record; `asks` is whether it asks for a GPU (`asks(r)` is that test for a record
    `r` with `lim` and `req`), or is given part of one by a GPU-sharing scheduler (`shared`,
    then also a field of its own).
    """
    lists = ("initContainers", "containers", "ephemeralContainers")
    parts = [_listed(s, list_name) for list_name in lists]
    keys = list(dict.fromkeys(inline))
    if keys:
        parts.append(_inline(s, keys))
    base = "(" + "\n    + ".join(parts) + ")"
    keep = {k: f"r.{k}" for k in ("c", "path", "ptr", "label", "role")}
    amounts = record(
        {
            **keep,
            "key": f"{s}.key",
            "mutable": f"{s}.mutable",
            "lim": _amounts("r.res", "limits"),
            "req": _amounts("r.res", "requests"),
        }
    )
    flags = (
        {"asks": asks("r")}
        if shared is None
        else {"asks": f"{asks('r')} || {shared('r')}", "shared": shared("r")}
    )
    full = record(
        {**keep, "key": "r.key", "mutable": "r.mutable", "lim": "r.lim", "req": "r.req", **flags}
    )
    return f"{base}\n    .map(r, {amounts})\n    .map(r, {full})"
