"""Hot reload of the rule folder: load the new set fully, then swap it in whole, or keep the old.

A ConfigMap mount updates by swapping a `..data` symlink, so the watcher fingerprints file
*contents* reached through the symlinks rather than trusting mtimes or inotify events.

Reading, validating and compiling a rule folder (`prepare`) touches only the files and the new
objects, so the server runs it in a worker thread: a big or hostile rule set never stalls the
event loop, and `/healthz` keeps answering. The swap (`install`) is a single attribute
assignment made on the event loop, and each request reads the holder once, so no request ever
sees half of one rule set and half of another.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from webhook.engine.compiled import CompiledRuleSet, compile_rules
from webhook.ruleset.files import RuleFileError, load_rules, rule_files
from webhook.ruleset.models import RuleSet
from webhook.server.metrics import RELOADS

__all__ = ["RuleHolder", "fingerprint"]

log = logging.getLogger("gpu-admission")


def fingerprint(folder: Path) -> str:
    """A digest of every rule file's name and content; "" when the folder can't be read."""
    digest = hashlib.sha256()
    try:
        for path in rule_files(folder):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:
        return ""
    return digest.hexdigest()


@dataclass
class RuleHolder:
    """The rule set in service, compiled, and the fingerprint of the files it was loaded from."""

    source: Path | None  # None: the built-in defaults, nothing to watch
    current: CompiledRuleSet | None = None
    digest: str = ""

    def refresh(self) -> bool:
        """Load the folder if its contents changed; True when a new set went into service.

        Both halves in the caller's thread: start-up and tests. The server's watcher runs
        `prepare` in a worker thread and `install` on the event loop instead.
        """
        rules = self.prepare()
        if rules is None:
            return False
        self.install(rules)
        return True

    def prepare(self) -> CompiledRuleSet | None:
        """Read, validate and compile the folder if its contents changed; None when they did not
        or the new set was refused (logged and counted). Safe in a worker thread: it changes
        nothing a request reads, only the fingerprint that only the watcher reads."""
        if self.source is None:  # the built-in defaults: compiled once, never changed
            return None if self.current is not None else compile_rules(RuleSet())
        if not self.source.exists():
            # A ConfigMap mount may appear later: say so on every check, and stay unready.
            kept = "the previous rule set keeps serving" if self.current else "not ready"
            log.error("rules folder %s does not exist (%s)", self.source, kept)
            self.digest = ""
            return None
        digest = fingerprint(self.source)
        if digest == self.digest:
            return None
        self.digest = digest  # a broken version is reported once, not on every poll
        try:
            rules = load_rules(self.source)
        except RuleFileError as exc:
            RELOADS.labels("refused").inc()
            kept = "the previous rule set keeps serving" if self.current else "not ready"
            log.error("rule set in %s refused (%s):\n%s", self.source, kept, exc)
            return None
        return compile_rules(rules)

    def install(self, rules: CompiledRuleSet) -> None:
        """Put a prepared set into service: one assignment, on the event loop."""
        self.current = rules
        RELOADS.labels("loaded").inc()
        if self.source is None:
            log.info("rule set loaded: the built-in defaults (no rules folder given)")
        else:
            log.info("rule set loaded from %s (%s)", self.source, self.digest[:12])
