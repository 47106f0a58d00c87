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


def _header(text: str) -> str:
    """The comment lines a file starts with: what wrote it and how to run it again."""
    lines = []
    for line in text.splitlines(keepends=True):
        if not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


def inject_ca_bundle_file(path: Path, ca_pem: bytes) -> int:
    """Rewrite the multi-document YAML file at `path` with the CA bundle on every webhook.

    Returns how many webhooks got it. The leading comment block is kept; comments further
    down are not (PyYAML drops them). The file is replaced atomically, so a failed write
    leaves the old one. Raises ValueError when the file holds no webhook to update.
    """
    text = path.read_text()
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ValueError(syntax_error(exc)[1]) from None
    # Written back out below, aliases expanded: refuse a file that would expand past reason.
    why = expansion(docs) if "&" in text else None
    if why is not None:
        raise ValueError(why)
    updated = inject_ca_bundle(docs, ca_pem)
    count = sum(len(d.get("webhooks") or []) for d in updated if _is_webhook_configuration(d))
    if count == 0:
        raise ValueError(f"{path}: no webhook in a Mutating/ValidatingWebhookConfiguration")
    body = yaml.safe_dump_all(updated, sort_keys=False, explicit_start=True, width=100)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(_header(text) + body)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count
