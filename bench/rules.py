#!/usr/bin/env python3
"""Rule-set loading cost: a generated rule folder with many overrides, loaded, compiled and
checked the way the server's hot reload and `gpu-admission rules check` do it.

Run from the repository root: `.venv/bin/python bench/rules.py [--overrides 12000]`. Prints
seconds per phase for a few sizes, so a quadratic step shows as a ratio far above the size
ratio; also the peak RSS of the process.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from webhook.engine import compile_rules  # noqa: E402
from webhook.rulecli.commands import conflicts  # noqa: E402
from webhook.ruleset.files import load_rules  # noqa: E402


def override(i: int) -> dict[str, Any]:
    """A mix like a big platform's: mostly one team namespace each, some patterns and selectors."""
    doc: dict[str, Any] = {"name": f"team-{i}", "rules": {}}
    kind = i % 10
    if kind < 7:
        doc["namespaces"] = [f"team-{i}", f"team-{i}-dev"]
    elif kind < 9:
        doc["namespaces"] = [f"team-{i}-*"]
    else:
        doc["namespaceSelector"] = {"matchLabels": {"team": f"t{i}"}}
    doc["rules"]["gpu-shm"] = {"maxSize": f"{1 + i % 32}Gi"}
    if i % 3 == 0:
        doc["rules"]["gpu-probe-delays"] = {"readinessMinDelaySeconds": 30 + i % 300}
    if i % 5 == 0:
        doc["rules"]["privileged-gpu"] = {"mode": "warn"}
    return doc


def write_folder(folder: Path, count: int, files: int = 4) -> None:
    per_file = -(-count // files)
    for f in range(files):
        chunk = [override(i) for i in range(f * per_file, min(count, (f + 1) * per_file))]
        (folder / f"overrides-{f}.yaml").write_text(yaml.safe_dump({"overrides": chunk}))
    (folder / "base.yaml").write_text((REPO / "rules" / "gpu-admission.yaml").read_text())


def measure(count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_folder(folder, count)
        size = sum(p.stat().st_size for p in folder.iterdir())
        t0 = time.perf_counter()
        ruleset = load_rules(folder)
        t1 = time.perf_counter()
        compiled = compile_rules(ruleset)
        for i in range(0, count, max(1, count // 200)):  # first request of 200 namespaces
            compiled.for_namespace(f"team-{i}", {"team": f"t{i}"})
        t2 = time.perf_counter()
        found = conflicts(ruleset)
        t3 = time.perf_counter()
    assert not found, found[:3]
    return {"bytes": size, "load": t1 - t0, "compile+200ns": t2 - t1, "conflicts": t3 - t2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--overrides", type=int, default=12_000)
    args = parser.parse_args()
    sizes = sorted({max(1, args.overrides // 4), max(1, args.overrides // 2), args.overrides})
    print(f"{'overrides':>9} {'MB':>6} {'load s':>8} {'compile s':>10} {'conflicts s':>12}")
    for count in sizes:
        r = measure(count)
        print(
            f"{count:>9} {r['bytes'] / 1e6:>6.2f} {r['load']:>8.2f} "
            f"{r['compile+200ns']:>10.3f} {r['conflicts']:>12.3f}"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
