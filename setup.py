"""Compiles the engine's hot path with mypyc when GPU_ADMISSION_COMPILE=1 (the image does).

Everything else about the package is in pyproject.toml. Without the variable the build is pure
Python, and so is every editable install: a compiled module next to its .py would shadow the
source a developer edits.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

# The modules a review runs through, the engine's in the order it meets them. Compiled, they
# answer a GPU pod in about 40% of the interpreted time (docs/benchmarks.md); `make test` runs
# the suite against this build too (tests/project/test_compiled_build.py).
COMPILED = [
    "webhook/engine/prefilter.py",
    "webhook/engine/subject.py",
    "webhook/engine/workloads.py",
    "webhook/engine/fields.py",
    "webhook/engine/views.py",
    "webhook/engine/podviews.py",
    "webhook/podrequest.py",
    "webhook/quantity.py",
    "webhook/namepatterns.py",
    "webhook/engine/pipeline.py",
    "webhook/engine/admit.py",
    "webhook/engine/patch.py",
    "webhook/engine/accounting.py",
    "webhook/engine/totals.py",
    "webhook/engine/reach.py",
    "webhook/engine/checks/isolation.py",
    "webhook/engine/checks/kserve.py",
    "webhook/engine/checks/placement.py",
    "webhook/engine/checks/priority.py",
    "webhook/engine/checks/probes.py",
    "webhook/engine/checks/quota.py",
    "webhook/engine/checks/quotafixes.py",
    "webhook/engine/checks/queue.py",
    "webhook/engine/checks/resources.py",
    "webhook/engine/checks/schedulable.py",
    "webhook/engine/checks/shm.py",
    "webhook/engine/checks/spend.py",
    "webhook/engine/checks/trust.py",
    "webhook/engine/claims.py",
    "webhook/engine/sharing.py",
    "webhook/engine/sharedmaps.py",
    "webhook/engine/queueing.py",
    "webhook/engine/decision.py",
    "webhook/engine/findings.py",
    "webhook/engine/context.py",
    # The rules in force per namespace shape: which names are GPUs, exemptions, overrides.
    "webhook/engine/compiled.py",
    # The cluster facts the cluster-aware rules read, and the GPU holds.
    "webhook/facts/model.py",
    "webhook/facts/devicekeys.py",
    "webhook/facts/nodematch.py",
    "webhook/facts/dra.py",
    "webhook/facts/reservations.py",
    "webhook/facts/static.py",
    "webhook/facts/servingruntimes.py",
    "webhook/facts/queues.py",
    # What the live cache keeps of each object, read page by page on a relist, and the stores
    # that keep them and build each review's facts.
    "webhook/facts/objects.py",
    "webhook/facts/relist.py",
    "webhook/facts/stores.py",
    # The server's side of a review: HTTP/1.1 parsing and answers, the review route, the
    # response, the metrics. (review.py stays interpreted: msgspec reads its structs'
    # annotations at run time.)
    "webhook/server/http/protocol.py",
    "webhook/server/http/routes.py",
    "webhook/server/http/body.py",
    "webhook/server/stages.py",
    "webhook/server/metrics.py",
    "webhook/server/responses.py",
    "webhook/server/admission.py",
    # The decision log line every judged review writes (logs.py, whose classes extend the
    # logging module's, stays interpreted).
    "webhook/loglines.py",
]

MYPY = "mypy>=1.10,<3"


def _compiling() -> bool:
    if os.environ.get("GPU_ADMISSION_COMPILE") != "1":
        return False
    if "editable_wheel" in sys.argv:
        print("GPU_ADMISSION_COMPILE ignored: an editable install stays pure Python")
        return False
    return True


def _extensions() -> list[object]:
    try:
        from mypyc.build import mypycify
    except ImportError:  # the first pass of a PEP 517 build: setup_requires brings mypy
        return []
    # The project's own mypy settings load the pydantic plugin, which mypyc cannot compile
    # against; these modules import no pydantic, so they are checked without it here (and
    # with it by `make lint`).
    return list(mypycify(["--config-file=", "--ignore-missing-imports", *COMPILED]))


if _compiling():
    setup(setup_requires=[MYPY], ext_modules=_extensions())
else:
    setup()
