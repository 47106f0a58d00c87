"""`certs inject` changes the `caBundle` values and nothing else: the file before and after
differ only there, whatever its comments, quotes, block scalars, blank lines and line ends."""

from __future__ import annotations

import base64
import difflib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.paths import ROOT
from webhook.certs.inject import inject_ca_bundle_file
from webhook.cli import main


# One `clientConfig` as written, before and after: `{old}` and `{new}` stand for the value in
# its quotes, `{line}` for the line inject adds, `{bundle}` for the bare bundle.
@dataclass(frozen=True)
class Client:
    before: str
    after: str


def _clients() -> list[Client]:
    block = '\n      service:\n        name: gpu-admission\n        namespace: "gpu-admission"\n'
    out = [
        Client(f"{block}      caBundle: {q}{old}{q}  # set by inject\n",
               f"{block}      caBundle: {q}{{bundle}}{q}  # set by inject\n")
        for q in ('"', "'", "")
        for old in ("", "b2xk")
        if q or old
    ]  # fmt: skip
    out += [
        # A block scalar, then a blank line and a comment the next key keeps.
        Client(f"{block}      caBundle: |\n        b2xk\n\n      # keep\n      x: y\n",
               f"{block}      caBundle: {{bundle}}\n\n      # keep\n      x: y\n"),
        # No caBundle yet: a line is added after the last entry, before the comment.
        Client(f"{block}      # the CA goes here\n",
               f"{block}      caBundle: {{bundle}}\n      # the CA goes here\n"),
        Client(" {service: {name: gpu-admission}, caBundle: ''}  # flow\n",
               " {service: {name: gpu-admission}, caBundle: '{bundle}'}  # flow\n"),
        Client(" {service: {name: gpu-admission}}\n",
               " {service: {name: gpu-admission}, caBundle: {bundle}}\n"),
    ]  # fmt: skip
    return out


CLIENTS = _clients()
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
SERVICE = "---\n# not a webhook configuration: untouched\napiVersion: v1\nkind: Service\n"
SERVICE += "metadata: {name: gpu-admission}\nspec:\n  ports: [{port: 443}]\n"


@st.composite
def files(draw: st.DrawFn) -> tuple[str, str, int]:
    """(file before, file after with `{bundle}` to fill in, webhooks) in varied formatting."""
    before, after, count = ["# how to fill this in:\n#   gpu-admission certs inject\n"], [], 0
    after.append(before[0])
    for d in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            before.append(SERVICE)
            after.append(SERVICE)
        kind = draw(st.sampled_from(KINDS))
        gap = "\n" * draw(st.integers(0, 2))
        name = draw(st.sampled_from(['"gpu-admission"', "'gpu-admission'", "gpu-admission"]))
        head = f"---\napiVersion: admissionregistration.k8s.io/v1\nkind: {kind}  # kind\n"
        head += f"metadata:\n  name: {name}\n{gap}webhooks:\n"
        before.append(head)
        after.append(head)
        for h in range(draw(st.integers(1, 3))):
            client = draw(st.sampled_from(CLIENTS))
            first = f"  - name: hook{d}-{h}.gpu-admission.io  # hook\n    clientConfig:"
            rest = "    sideEffects: None\n" if draw(st.booleans()) else ""
            if "\n" not in client.before.rstrip("\n") and rest:
                rest = "    sideEffects: None\n"
            before.append(first + client.before + rest)
            after.append(first + client.after + rest)
            count += 1
    crlf = draw(st.booleans())
    text_before, text_after = "".join(before), "".join(after)
    if crlf:
        text_before = text_before.replace("\n", "\r\n")
        text_after = text_after.replace("\n", "\r\n")
    return text_before, text_after, count


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=files())
def test_only_the_ca_bundle_values_change(
    case: tuple[str, str, int], ca_pem: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    before, after, count = case
    bundle = base64.b64encode(ca_pem).decode("ascii")
    target = tmp_path_factory.mktemp("inject") / "webhooks.yaml"
    target.write_bytes(before.encode())

    assert inject_ca_bundle_file(target, ca_pem) == count

    assert target.read_bytes().decode() == after.replace("{bundle}", bundle)
    for doc in yaml.safe_load_all(target.read_text()):
        for hook in (doc or {}).get("webhooks") or []:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem


def test_the_shipped_patch_differs_only_in_its_ca_bundle_lines(
    ca_pem: bytes, tmp_path: Path
) -> None:
    source = ROOT / "manifests/overlays/self-signed/webhooks-cabundle.yaml"
    target, ca = tmp_path / "webhooks-cabundle.yaml", tmp_path / "ca.crt"
    target.write_bytes(source.read_bytes())
    ca.write_bytes(ca_pem)

    assert main(["certs", "inject", "--ca", str(ca), "--file", str(target)]) == 0

    diff = list(
        difflib.unified_diff(
            source.read_text().splitlines(), target.read_text().splitlines(), lineterm="", n=0
        )
    )
    changed = [line for line in diff[2:] if not line.startswith("@@")]
    bundle = base64.b64encode(ca_pem).decode("ascii")
    # One webhook per empty caBundle in the shipped patch: each of those lines, and no other,
    # is replaced by the bundle (difflib may group the removals and additions either way).
    webhooks = source.read_text().count('caBundle: ""')
    assert webhooks >= 2
    assert sorted(changed) == sorted(
        ['-      caBundle: ""'] * webhooks + [f'+      caBundle: "{bundle}"'] * webhooks
    )


def test_a_bundle_behind_an_anchor_is_refused_not_half_written(
    ca_pem: bytes, tmp_path: Path
) -> None:
    text = (
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n"
        "metadata: {name: x}\nwebhooks:\n"
        '  - name: a.x.io\n    clientConfig:\n      caBundle: &ca ""\n'
        "  - name: b.x.io\n    clientConfig:\n      caBundle: *ca\n"
    )
    target = tmp_path / "w.yaml"
    target.write_text(text)
    with pytest.raises(ValueError, match="could not be set in place"):
        inject_ca_bundle_file(target, ca_pem)
    assert target.read_text() == text
