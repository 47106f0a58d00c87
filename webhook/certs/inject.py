"""Write a CA bundle into webhook configurations, for the self-signed overlay.

cert-manager's cainjector does this in clusters that run it; without it, `gpu-admission certs
inject` puts the CA from `certs generate` into `webhooks[].clientConfig.caBundle` of every
Mutating/ValidatingWebhookConfiguration in a manifest (or kustomize patch) file.
"""

from __future__ import annotations

import base64
import copy
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509

from webhook.yamlinput import expansion, syntax_error

__all__ = [
    "WEBHOOK_CONFIGURATION_KINDS",
    "check_pem",
    "inject_ca_bundle",
    "inject_ca_bundle_file",
]

WEBHOOK_CONFIGURATION_KINDS = frozenset(
    {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
)


def check_pem(ca_pem: bytes) -> None:
    """Refuse anything but PEM certificates: a key or a typo must not become the trust root."""
    try:
        x509.load_pem_x509_certificates(ca_pem)
    except ValueError:
        raise ValueError(
            "not a PEM certificate (the CA `gpu-admission certs generate` writes as ca.crt)"
        ) from None


def _is_webhook_configuration(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") in WEBHOOK_CONFIGURATION_KINDS


def inject_ca_bundle(docs: list[dict[str, Any]], ca_pem: bytes) -> list[dict[str, Any]]:
    """Copies of `docs` with `caBundle` (base64 of `ca_pem`) set on every webhook.

    Documents of other kinds come back unchanged; the input is not modified.
    """
    check_pem(ca_pem)
    bundle = base64.b64encode(ca_pem).decode("ascii")
    out: list[dict[str, Any]] = []
    for doc in docs:
        if _is_webhook_configuration(doc):
            doc = copy.deepcopy(doc)
            for webhook in doc.get("webhooks") or []:
                client = webhook.get("clientConfig")
                if not isinstance(client, dict):
                    client = webhook["clientConfig"] = {}
                client["caBundle"] = bundle
        out.append(doc)
    return out


_QUOTES = {'"': '"', "'": "'"}


def _scalar(node: yaml.Node, bundle: str) -> str:
    """The bundle written as the value it replaces was: in the same quotes, or plain."""
    style = getattr(node, "style", None)
    if style in _QUOTES:
        return f"{style}{bundle}{style}"
    return bundle


def _key(mapping: yaml.MappingNode, name: str) -> tuple[yaml.Node, yaml.Node] | None:
    for key, value in mapping.value:
        if isinstance(key, yaml.ScalarNode) and key.value == name:
            return key, value
    return None


def _line_end(text: str, index: int) -> int:
    """Where the line holding `index` ends, past its line break (a trailing comment stays
    on its line)."""
    if index > 0 and text[index - 1] == "\n":
        return index
    end = text.find("\n", index)
    return len(text) if end < 0 else end + 1


def _content_end(node: yaml.Node) -> int:
    """Where a value's own text ends. A block collection's end mark is the next token's
    start, past any comments and blank lines between: its last value's end is used instead."""
    while not getattr(node, "flow_style", True) and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    return int(node.end_mark.index)


def _add_entry(text: str, mapping: yaml.MappingNode, entry: str) -> tuple[int, int, str]:
    """An edit adding `entry` (`key: value`, one line) as the mapping's last entry."""
    if mapping.flow_style:
        close = mapping.end_mark.index - 1  # the closing brace
        return close, close, (", " if mapping.value else "") + entry
    first, last = mapping.value[0][0], mapping.value[-1][1]
    at = _line_end(text, _content_end(last))
    newline = "\r\n" if "\r\n" in text else "\n"
    lead = newline if at == len(text) and not text.endswith("\n") else ""
    return at, at, f"{lead}{' ' * first.start_mark.column}{entry}{newline}"


def _edits(text: str, bundle: str) -> tuple[list[tuple[int, int, str]], int]:
    """(start, end, new text) of each change that sets every webhook's `caBundle`, and how
    many webhooks there are. Only those spans change: comments, quotes, blank lines and
    every other value are the file's own."""
    edits: dict[int, tuple[int, int, str]] = {}
    count = 0
    for doc in yaml.compose_all(text, Loader=yaml.SafeLoader):
        if not isinstance(doc, yaml.MappingNode):
            continue
        kind = _key(doc, "kind")
        if kind is None or getattr(kind[1], "value", None) not in WEBHOOK_CONFIGURATION_KINDS:
            continue
        hooks = _key(doc, "webhooks")
        if hooks is None or not isinstance(hooks[1], yaml.SequenceNode):
            continue
        for hook in hooks[1].value:
            if not isinstance(hook, yaml.MappingNode):
                continue
            count += 1
            found = _key(hook, "clientConfig")
            if found is None:  # the apiserver refuses a webhook without one
                edit = _add_entry(text, hook, f"clientConfig: {{caBundle: {bundle}}}")
                edits[edit[0]] = edit
                continue
            client = found[1]
            if isinstance(client, yaml.MappingNode) and client.value:
                current = _key(client, "caBundle")
                if current is None:
                    edit = _add_entry(text, client, f"caBundle: {bundle}")
                else:
                    value = current[1]
                    start, end = value.start_mark.index, value.end_mark.index
                    new = _scalar(value, bundle)
                    if getattr(value, "style", None) in ("|", ">"):
                        # A block scalar's span runs to the next key: keep the line breaks
                        # and blank lines after its last line.
                        body = text[start:end]
                        new += body[len(body.rstrip()) :]
                    edit = (start, end, new)
            else:  # `clientConfig:` empty, `{}`, or not a mapping: the apiserver refuses it
                start, end = client.start_mark.index, client.end_mark.index
                edit = (start, end, f"{{caBundle: {bundle}}}")
            edits[edit[0]] = edit
    return sorted(edits.values()), count


def inject_ca_bundle_file(path: Path, ca_pem: bytes) -> int:
    """Set `caBundle` on every webhook of the multi-document YAML file at `path`.

    Returns how many webhooks got it. Only the `caBundle` values change (added where a webhook
    has none): every other byte of the file stays, comments and formatting included. The
    file is replaced atomically, so a failed write leaves the old one. Raises ValueError when
    the file holds no webhook to update.
    """
    check_pem(ca_pem)
    bundle = base64.b64encode(ca_pem).decode("ascii")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        why = expansion(docs) if "&" in text else None
        if why is not None:
            raise ValueError(why)
        edits, count = _edits(text, bundle)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise ValueError(syntax_error(exc)[1]) from None
    if count == 0:
        raise ValueError(f"{path}: no webhook in a Mutating/ValidatingWebhookConfiguration")
    out = text
    for start, end, new in reversed(edits):
        out = out[:start] + new + out[end:]
    # What was written must read as the documents with the bundle set, and nothing else.
    try:
        written = [d for d in yaml.safe_load_all(out) if d is not None]
    except yaml.YAMLError:
        written = None
    if written != inject_ca_bundle(docs, ca_pem):
        raise ValueError(
            f"{path}: the caBundle values could not be set in place (an anchor or alias on "
            "one?); set them by hand, or write them without anchors and aliases"
        )
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(out.encode("utf-8"))
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count
