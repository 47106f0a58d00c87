"""The base of every rule-file model: strict, frozen, camelCase."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """Strict: an unknown key in a rule file is a typo, and typos must not pass.

    Only the camelCase spelling is accepted, so an override merges onto exactly one key.
    Frozen: a loaded rule set is shared by concurrent requests and swapped whole.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)
