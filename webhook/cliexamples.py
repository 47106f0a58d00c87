"""The examples each `gpu-admission` subcommand's help ends with, and what puts them there.

Kept in one table so the CLI reference page (docs/hooks/cli_reference.py) and the tests read
the same lines: every example is parsed by the tests, so none can drift from the grammar.
"""

from __future__ import annotations

import argparse

__all__ = ["EXAMPLES", "add_examples", "commands"]

# Subcommand path -> command lines, each run from a checkout (rules/ and certs/ in it).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "certs": (
        "gpu-admission certs generate --if-missing",
        "gpu-admission certs inject --ca certs/ca.crt",
    ),
    "certs generate": (
        "gpu-admission certs generate --if-missing",
        "gpu-admission certs generate --out certs --hosts gpu-admission.gpu-admission.svc",
        "gpu-admission certs generate --force",
    ),
    "certs inject": (
        "gpu-admission certs inject",
        "gpu-admission certs inject --ca certs/ca.crt --file dist/install.yaml",
    ),
    "serve": (
        "gpu-admission serve --rules rules --cluster-snapshot examples/cluster-snapshot.yaml",
        "gpu-admission serve --host 0.0.0.0 --kubeconfig ~/.kube/config --log-format json",
    ),
    "audit": (
        "gpu-admission audit examples/",
        "gpu-admission audit --cluster-snapshot examples/cluster-snapshot.yaml -o sarif examples/",
        "gpu-admission audit --cluster --namespace ml-team --only-failed",
    ),
    "review": (
        "gpu-admission review pod.yaml",
        "gpu-admission review --mutated --cluster-snapshot cluster.yaml pod.yaml",
        "gpu-admission review --operation UPDATE --old before.yaml after.yaml",
    ),
    "rules": (
        "gpu-admission rules check --rules rules",
        "gpu-admission rules explain --namespace ml-team",
    ),
    "rules check": (
        "gpu-admission rules check --rules rules",
        "gpu-admission rules check rules",
        "gpu-admission rules check --rules team.yaml --cluster-snapshot cluster.yaml",
    ),
    "rules schema": (
        "gpu-admission rules schema",
        "gpu-admission rules schema --out rules.schema.json",
    ),
    "rules test": (
        "gpu-admission rules test --rules rules",
        "gpu-admission rules test --rules rules --cases rules/tests/defaults.yaml",
    ),
    "rules webhooks": (
        "gpu-admission rules webhooks --rules rules",
        "gpu-admission rules webhooks --rules rules --out webhooks.yaml",
    ),
    "rules explain": (
        "gpu-admission rules explain --namespace ml-team",
        "gpu-admission rules explain --rules rules --namespace ml-team --labels team=ml",
    ),
    "export": (
        "gpu-admission export --rules rules",
        "gpu-admission export --rules rules --kubernetes 1.34 --out policies/",
        "gpu-admission export --rules rules --summary",
    ),
    "snapshot": (
        "gpu-admission snapshot --out cluster.yaml",
        "gpu-admission snapshot --namespace ml-team --namespace research --out cluster.yaml",
        "gpu-admission audit --cluster-snapshot cluster.yaml manifests/",
    ),
    "completion": (
        "gpu-admission completion bash > /etc/bash_completion.d/gpu-admission",
        'eval "$(gpu-admission completion zsh)"',
    ),
}


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser by its path ("rules check"), parents before children."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    key = f"{path} {name}".strip()
                    out[key] = child
                    walk(child, key)

    walk(parser, "")
    return out


def add_examples(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """End each subcommand's help with its examples, printed as written."""
    for path, sub in commands(parser).items():
        lines = EXAMPLES.get(path, ())
        if lines:
            sub.epilog = "examples:\n" + "".join(f"  {line}\n" for line in lines)
            sub.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser
