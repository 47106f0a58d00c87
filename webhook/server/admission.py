"""From an AdmissionRequest to the engine's request: the fields it reads, the object left as
the bytes the apiserver sent.

`/mutate` only mutates (it denies only an object it cannot read); verdicts and warnings come
from `/validate`, so kubectl never shows a warning twice. Which requests are skipped, the fast
path, the subject and the decision are all the engine's (`engine.admit`); this module only
hands it the request.
"""

from __future__ import annotations

from webhook.engine.admit import Request
from webhook.server.review import AdmissionRequest

__all__ = ["engine_request"]


def engine_request(review: AdmissionRequest) -> Request:
    """The engine's request for `review`: the objects stay raw JSON until a rule needs them."""
    # Positional: a compiled constructor called with keywords costs several times more.
    return Request(
        review.kind.group,
        review.kind.kind,
        review.operation,
        review.namespace,
        review.sub_resource,
        None,
        None,
        review.raw_object,
        review.raw_old_object if review.operation == "UPDATE" else None,
    )
