"""The GPU holds' default times, read by the holds themselves, the fact sources and the
`serve` flags; a module of their own, so the command line reads them without loading facts."""

from __future__ import annotations

__all__ = ["HOLD_SECONDS", "HOLD_SETTLE_SECONDS"]

# The longest an admitted GPU pod's GPUs are held until the watch shows the pod.
HOLD_SECONDS = 30.0
# With a current watch of pods, how long a hold it has not matched lives: the apiserver's
# default webhook timeout (the settle time grows with the cluster's slowest webhook on pods).
HOLD_SETTLE_SECONDS = 10.0
