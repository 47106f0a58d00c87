"""The rule engine and its checks: pure functions from a subject and facts to a decision.

Nothing in this package does I/O: no web server, API client, event loop, TLS or files.
"""

from webhook.engine.admit import Decided, Fast, Outcome, Request, Skipped, admit
from webhook.engine.compiled import CompiledRules, CompiledRuleSet, compile_rules
from webhook.engine.decision import Decision, Judged, Mode, Verdict, combine
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import Subject, subject_for

__all__ = [
    "CompiledRuleSet",
    "CompiledRules",
    "Decided",
    "Decision",
    "Fast",
    "Judged",
    "Mode",
    "Outcome",
    "Request",
    "Skipped",
    "Stage",
    "Subject",
    "Verdict",
    "admit",
    "combine",
    "compile_rules",
    "evaluate",
    "subject_for",
]
