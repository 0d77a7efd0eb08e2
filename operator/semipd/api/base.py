"""Shared pieces of the v1alpha1 API: group/version constants, name patterns, the base model and the name rule."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from semipd.api.rules import Rule, RuleModel

GROUP = "semipd.io"
VERSION = "v1alpha1"
KIND = "InferencePool"
PLURAL = "inferencepools"
SINGULAR = "inferencepool"
SHORT_NAMES = ("sipool",)
CATEGORIES = ("semipd",)
API_VERSION = f"{GROUP}/{VERSION}"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

Quantity = Annotated[
    int | Annotated[str, Field(pattern=QUANTITY, max_length=64)],
    Field(json_schema_extra={"x-kubernetes-int-or-string": True, "pattern": QUANTITY}),
]
"""A Kubernetes resource quantity (`8`, `500m`, `64Gi`)."""


class ApiModel(RuleModel):
    """Base for every API object: camelCase on the wire, docstrings as descriptions, no extras, no coercion.

    Strict: `"3"` is not 3 and `"yes"` is not true, as the apiserver's schema would say; enum fields
    opt back into value lookup (`Field(strict=False)`), which accepts only the enum's own strings."""

    model_config = ConfigDict(
        strict=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="forbid",
        frozen=True,
    )


MAX_NAME_LENGTH = 40

NAME_RULE = Rule(
    cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    message=f"metadata.name must be a DNS label of at most {MAX_NAME_LENGTH} characters starting with a letter "
    "(it prefixes workload, Service and label names)",
    holds=lambda name: len(name) <= MAX_NAME_LENGTH and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) is not None,
)
"""The InferencePool's own name becomes part of child names and label values, so it is bounded."""
