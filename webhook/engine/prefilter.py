"""The fast path: decide from the raw JSON bytes that no rule could apply, without parsing.

Most pods ask for no GPU. Every rule that can fire on such a pod needs a tell-tale string in
the object: a GPU resource name (for the GPU rules), a GPU taint key (a toleration of it), a GPU
node-label prefix, a keyless toleration, `nodeName`, a device variable (`..._VISIBLE_DEVICES`),
`hostPath`, `privileged`, DRA `resourceClaims` (whether they are GPU claims only the cluster
facts say), or a device-injection annotation's domain.
(Clusters whose GPU nodes carry no GPU taint are the exception: the driver skips this filter
when its facts show one.) If none of them occurs in the bytes, the answer is
"allowed, no patch" and the object is never decoded. A marker that occurs somewhere else (an
annotation, an argument) only costs the full path. JSON escapes (`\\/`, `\\u`) could hide a
marker, so bytes containing them always take the full path.

An object too malformed to read whose bytes hold no marker is allowed here: it cannot ask for
a GPU, and the apiserver's schema validation, which runs after the mutating webhooks, refuses
it anyway.
"""

from __future__ import annotations

import re

from webhook.ruleset.models import RuleSet

__all__ = ["Gated", "Group", "gated", "markers", "might_apply"]

_ALWAYS = (
    # NVIDIA_VISIBLE_DEVICES and the CUDA, HIP and ROCm runtimes' device lists (DEVICE_ENV).
    b"_VISIBLE_DEVICES",
    b"RUNAI-VISIBLE-DEVICES",  # KAI's device key before v0.7.4 (a ConfigMap's, engine.sharedmaps)
    b"hostPath",
    # Privileged mode sees every device of a node (`"privileged":false` only costs the full path).
    b'"privileged"',
    # Ways onto a GPU node without a GPU word: nodeName skips the scheduler, and a toleration
    # with no key tolerates every taint. The apiserver writes a Toleration's fields in struct
    # order (key first) and CRD objects with sorted keys, so a keyless one starts like this.
    b'"nodeName"',
    b'{"operator":"Exists"',
    b'"effect":"NoSchedule","operator":"Exists"',
    b'"effect":"NoExecute","operator":"Exists"',
    # CRD objects keep empty fields: a keyless toleration may carry "key":"" or "effect":"".
    b'"key":"","operator":"Exists"',
    b'"effect":"","operator":"Exists"',
    b"nvidia-container-devices",  # the toolkit's volume-mount device list
    # DRA: a pod spec's claims name no GPU word; only the facts tell a GPU claim. Nor does a
    # DRA class's implicit resource name (deviceclass.resource.kubernetes.io/<class>).
    b'"resourceClaims"',
    b"deviceclass.resource.kubernetes.io/",
    # Device-injection annotations (engine.injection): GKE's, and the NRI plugins' (devices,
    # mounts, CDI devices under noderesource.dev and nri.io).
    b"devices.gke.io",
    b"noderesource.dev",
    b"nri.io",
)
_ESCAPES = (b"\\/", b"\\u")  # as they appear in the JSON bytes: backslash-slash, backslash-u


def _literal(pattern: str) -> str:
    """The longest run of literal characters in a shell-style pattern."""
    return max(re.split(r"[*?\[\]]", pattern), key=len)


def _domain(name: str) -> str:
    head, slash, _ = name.partition("/")
    return head + slash if slash and len(head) >= 3 else name


def markers(rules: RuleSet) -> tuple[bytes, ...] | None:
    """Byte strings of which at least one occurs in any object a rule could apply to; None when
    the rule set has a pattern too loose to give one (then every object takes the full path)."""
    found: set[bytes] = set(_ALWAYS)
    literals = [_literal(p) for p in rules.gpu_resources]
    taint_keys = {t.key for t in rules.rules.gpu_tolerations.tolerations}
    for override in rules.overrides:  # an override may name other taint keys
        for t in override.rules.get("gpu-tolerations", {}).get("tolerations", []):
            if isinstance(t, dict) and isinstance(t.get("key"), str):
                taint_keys.add(t["key"])
    if any(len(lit) < 3 for lit in literals):
        return None
    # A domain ("nvidia.com/") stands for every name under it: fewer scans, and a marker that
    # matches more than needed only sends that object down the full path.
    found.update(_domain(lit).encode() for lit in literals)
    found.update(_domain(k).encode() for k in taint_keys)
    # A pod that selects GPU node labels can land on GPU nodes (the GPU-access rules).
    found.update(_domain(p).encode() for p in rules.rules.gpu_schedulable.gpu_label_prefixes)
    # A pod given part of a GPU by a sharing scheduler names it (engine.sharing), quoted as a
    # JSON string value.
    schedulers = rules.gpu_sharing.schedulers
    if any(len(s) < 3 or '"' in s or "\\" in s for s in schedulers):
        return None
    found.update(f'"{s}"'.encode() for s in schedulers)
    # A marker that contains another is redundant: "nvidia.com/gpumem" has "nvidia.com/gpu".
    return tuple(sorted(m for m in found if not any(o != m and o in m for o in found)))


# Substrings several markers share: one scan for the gate rules them all out at once. A marker
# holds its gate, so a marker can only occur where its gate does.
_GATES = (b".com/", b"Exists", b".io/", b".ai/")

# (gate, markers under it, anchor, prefixes): when every marker of a group ends with one
# anchor longer than the gate, the group is told by finding the anchor and looking at the bytes
# before it (`prefixes`), not by one scan per marker.
Group = tuple[bytes, tuple[bytes, ...], bytes, tuple[bytes, ...]]
Gated = tuple[Group, ...]


def _common_suffix(found: list[bytes]) -> bytes:
    shortest = min(found, key=len)
    n = 0
    while n < len(shortest) and all(m[-1 - n] == shortest[-1 - n] for m in found):
        n += 1
    return shortest[len(shortest) - n :]


def _group(gate: bytes, found: list[bytes]) -> Group:
    ordered = tuple(sorted(found, key=_likely))
    anchor = _common_suffix(found) if len(found) > 1 else b""
    if gate in anchor and len(anchor) > len(gate):
        # The keyless tolerations: five markers, each `<prefix>"operator":"Exists"`. A pod has
        # two `"operator":"Exists"` (the default not-ready/unreachable tolerations), so two
        # finds and a look behind each beat five scans of the whole object.
        return gate, ordered, anchor, tuple(m[: len(m) - len(anchor)] for m in ordered)
    return gate, ordered, b"", ()


def gated(found: tuple[bytes, ...] | None) -> Gated | None:
    """The markers grouped under the gates they hold, a lone marker its own gate. Groups with
    a GPU resource domain come first: a GPU object, the common case past this filter, is
    then told by its first scans."""
    if found is None:
        return None
    groups: dict[bytes, list[bytes]] = {}
    for marker in found:
        gate = next((g for g in _GATES if g in marker), marker)
        groups.setdefault(gate, []).append(marker)
    order = sorted(groups.items(), key=lambda item: (item[0] != b".com/", item[0]))
    return tuple(_group(gate, ms) for gate, ms in order)


# The GPU vendors' domains, most pods past this filter first: scanned before the other names.
_LIKELY = (b"nvidia.com/", b"amd.com/", b"gpu.intel.com/")


def _likely(marker: bytes) -> tuple[int, bytes]:
    return (_LIKELY.index(marker) if marker in _LIKELY else len(_LIKELY), marker)


def might_apply(raw: bytes, found: Gated | None) -> bool:
    """False only when no rule can have anything to say about this object; `found` is what
    `gated(markers(...))` gave for the rule set (the compiled rule set keeps it).

    Substring scans (C speed, ~1 µs each for a typical pod) beat one regex alternation
    (~40 µs), and gates make them few: a plain pod costs one scan per gate, not per marker.
    Escapes are only looked for when there is a backslash at all (one memchr).
    """
    if found is None:
        return True
    if b"\\" in raw and (_ESCAPES[0] in raw or _ESCAPES[1] in raw):
        return True
    for gate, group, anchor, prefixes in found:
        if anchor:
            at = raw.find(anchor)
            while at >= 0:
                if raw.endswith(prefixes, 0, at):
                    return True
                at = raw.find(anchor, at + 1)
        elif gate in raw and (
            (len(group) == 1 and group[0] is gate) or any(m in raw for m in group)
        ):
            return True
    return False
