"""Kubernetes label selectors (matchLabels + matchExpressions), as rule files write them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from webhook.modelerrors import Invalid

__all__ = ["LabelSelector", "SelectorRequirement"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)


class SelectorRequirement(_Model):
    key: str = Field(min_length=1, examples=["team"])
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(examples=["In"])
    values: list[str] = Field(default_factory=list, examples=[["ml", "research"]])

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise Invalid(
                f"operator {self.operator} needs at least one value",
                "add values: [a, b] (the label values to match), or use operator Exists",
            )
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise Invalid(
                f"operator {self.operator} takes no values",
                "remove values, or use operator In",
                ("values",),
            )
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


class LabelSelector(_Model):
    """Same semantics as metav1.LabelSelector; an empty selector matches everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[SelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            e.matches(labels) for e in self.match_expressions
        )

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for e in self.match_expressions:
            values = ",".join(e.values)
            parts.append(f"{e.key} {e.operator} ({values})" if values else f"{e.operator} {e.key}")
        return ", ".join(parts) or "everything"
