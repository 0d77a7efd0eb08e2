"""Cross-field validation rules declared once, enforced twice: by the apiserver and by pydantic.

Each `Rule` carries the CEL expression that lands in the CRD's `x-kubernetes-validations` and the
Python predicate the operator (and offline tools) evaluate on the same object, so an InferencePool
that slips past an old CRD is still refused with the same message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, model_validator
from pydantic_core import PydanticCustomError


@dataclass(frozen=True)
class Rule:
    """One cross-field invariant: CEL for the apiserver, `holds` for Python."""

    cel: str
    message: str
    holds: Callable[[Any], bool]
    field_path: str | None = None
    reason: str = "FieldValueInvalid"

    def as_validation(self) -> dict[str, str]:
        """Render as a CRD `x-kubernetes-validations` entry."""
        out = {"rule": self.cel, "message": self.message, "reason": self.reason}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out


class RuleModel(BaseModel):
    """Base for API models that declare `__rules__`; checks them after field validation."""

    __rules__: tuple[Rule, ...] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> RuleModel:
        for rule in type(self).__rules__:
            if not rule.holds(self):
                # The field path travels in the error context so callers can name the exact field.
                raise PydanticCustomError("rule", rule.message, {"field_path": rule.field_path or ""})
        return self
