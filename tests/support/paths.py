"""Where things are: the repository, the corpus beside it, the example cluster snapshot."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
SNAPSHOT = ROOT / "examples" / "cluster-snapshot.yaml"
K8S_VERSION = "1.33"  # the Kubernetes OpenAPI schema objects are validated against
GOLDEN = ROOT / "tests" / "golden"
