"""The review routes: an AdmissionReview in, the engine's answer out, counted and held.

`/mutate` only mutates (it denies only an object it cannot read); verdicts and warnings come
from `/validate`, so kubectl never shows a warning twice. Which requests are skipped, the fast
path, the subject and the decision are all the engine's (`engine.admit`); this module hands
it the request, with the objects left as the bytes the apiserver sent, and answers.
Compiled with the engine (setup.py): every review passes through here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import orjson

from webhook.engine.admit import Decided, Outcome, Request, admit
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.pipeline import Stage
from webhook.facts.sources import ClusterSource
from webhook.server.http.offload import OFFLOAD_BODY
from webhook.server.http.routes import Answer, Handler, Later, Routes, error
from webhook.server.http.routes import Request as HttpRequest
from webhook.server.http.state import ServerState
from webhook.server.metrics import CONTENT_TYPE, TALLY, record, render
from webhook.server.reload import RuleHolder
from webhook.server.responses import respond
from webhook.server.review import AdmissionRequest, BadReview, decode
from webhook.server.stages import OFF, StageTotals, Watch

__all__ = ["Admission", "engine_request"]

# A review decided: the request, the engine's outcome, the encoded answer; or why the body is
# no AdmissionReview.
Reviewed = tuple[AdmissionRequest, Outcome, bytes] | str


def engine_request(review: AdmissionRequest) -> Request:
    """The engine's request for `review`: the objects stay raw JSON until a rule needs them."""
    return Request.reviewed(
        group=review.kind.group,
        kind=review.kind.kind,
        operation=review.operation,
        namespace=review.namespace,
        subresource=review.sub_resource,
        raw=review.raw_object,
        raw_old=review.raw_old_object,
        user=review.user_info.username,
    )


@dataclass
class Admission:
    """What the routes answer with: the rules in force, the cluster facts, the shared state,
    and the stage timer when `serve --profile-stages` is on."""

    rules: RuleHolder
    cluster: ClusterSource = field(default_factory=ClusterSource)
    state: ServerState = field(default_factory=ServerState)
    profile: StageTotals | None = None

    def review(self, stage: Stage) -> Handler:
        """One review, read top to bottom: decode, decide, encode once, record once, then
        hold. A body that is no AdmissionReview is the caller's bug: 400 with the reason.

        Deciding (decode to encode) touches only the request, the rules and the facts, so a
        large body is decided on the worker thread (offload.py); recording and holding stay
        on the loop, where the metrics and holds live."""
        endpoint = stage.value

        def decide(body: bytes | bytearray, rules: CompiledRuleSet, watch: Watch) -> Reviewed:
            try:
                review = decode(body).request
            except BadReview as exc:
                return str(exc)
            watch.lap("decode")
            source = self.cluster
            outcome = admit(engine_request(review), rules, source.facts, stage=stage, lap=watch.lap)
            decision = outcome.decision if isinstance(outcome, Decided) else None
            answer = respond(review.uid, decision)
            watch.lap("encode")
            return review, outcome, answer

        def finish(decided: Reviewed, started: float, watch: Watch) -> Answer:
            if isinstance(decided, str):
                TALLY.request(endpoint, "", "error")
                return error(400, decided)
            review, outcome, answer = decided
            record(endpoint, review, outcome)
            watch.lap("metrics")
            # What an admitted pod holds until the watch shows it; never for a dry run.
            hold = outcome.decision.hold if isinstance(outcome, Decided) else None
            source = self.cluster
            if hold is not None and source.reservations is not None and not review.dry_run:
                source.reservations.hold(hold)
            TALLY.observe(endpoint, time.perf_counter() - started)
            watch.lap("hold")
            return Answer(200, answer)

        def handle(request: HttpRequest) -> Answer | Later:
            rules = self.rules.current  # read once: a reload can't change it mid-request
            if rules is None:
                return error(503, "no valid rule set loaded yet")
            started = time.perf_counter()
            watch = self.profile.start() if self.profile is not None else OFF
            body = request.body
            if len(body) > OFFLOAD_BODY:
                return Later(
                    body,
                    lambda given: decide(given, rules, watch),
                    lambda decided: finish(decided, started, watch),
                )
            return finish(decide(body, rules, watch), started, watch)

        return handle

    def metrics(self, request: HttpRequest) -> Answer:
        return Answer(200, render(), CONTENT_TYPE)

    def healthz(self, request: HttpRequest) -> Answer:
        return Answer(200, b"ok", "text/plain")

    def readyz(self, request: HttpRequest) -> Answer:
        if self.state.draining:
            return Answer(503, b"shutting down", "text/plain")
        if self.rules.current is None:
            return Answer(503, b"no valid rule set loaded", "text/plain")
        if not self.cluster.ready:
            return Answer(503, b"cluster facts not synced yet", "text/plain")
        return Answer(200, b"ok", "text/plain")

    def stages(self, request: HttpRequest) -> Answer:
        report = self.profile.report() if self.profile is not None else {}
        return Answer(200, orjson.dumps(report))

    def add_probes(self, routes: Routes) -> None:
        routes.add("GET", "/metrics", self.metrics)
        routes.add("GET", "/healthz", self.healthz)
        routes.add("GET", "/readyz", self.readyz)
