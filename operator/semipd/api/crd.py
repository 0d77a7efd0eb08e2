"""Generate the InferencePool CustomResourceDefinition from the pydantic models.

pydantic emits ordinary JSON Schema; the apiserver wants a *structural* schema. This module
rewrites one into the other (inline `$ref`s, drop nulls and titles, int-or-string, object
defaults so nested defaults apply) and adds what only a CRD has: CEL rules, the status
subresource, printer columns, names and categories.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault
from pydantic_core import core_schema

from semipd.api import v1alpha1 as api
from semipd.api.rules import RuleModel

_DROP_KEYS = {"title", "propertyNames"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Pools", "type": "integer", "jsonPath": ".status.summary.pools"},
    {"name": "Replicas", "type": "string", "jsonPath": ".status.summary.replicas"},
    {"name": "Split", "type": "string", "jsonPath": ".status.summary.split", "description": "prefill:decode %"},
    {"name": "TTFT-P99", "type": "string", "jsonPath": ".status.summary.ttftP99"},
    {"name": "ITL-P99", "type": "string", "jsonPath": ".status.summary.itlP99"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Reason",
        "type": "string",
        "priority": 1,
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
    },
]


def _rule_models() -> dict[str, type[RuleModel]]:
    found: dict[str, type[RuleModel]] = {}
    stack: list[type[RuleModel]] = [RuleModel]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            found[sub.__name__] = sub
            stack.append(sub)
    return found


def _validations(model_name: str) -> list[dict[str, str]]:
    model = _rule_models().get(model_name)
    return [r.as_validation() for r in model.__rules__] if model else []


def _strip_nulls(node: dict[str, Any]) -> dict[str, Any]:
    """Collapse `anyOf: [X, {type: null}]` (pydantic's Optional) into X: absence is how CRDs say null."""
    members = [m for m in node["anyOf"] if m.get("type") != "null"]
    if len(members) == len(node["anyOf"]):
        return node
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if rest.get("default", ...) is None:
        del rest["default"]
    if len(members) == 1:
        merged = dict(members[0])
        merged.update(rest)
        return merged
    return {**rest, "anyOf": members}


def _rewrite(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_rewrite(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "anyOf" in node:
        node = _strip_nulls(node)
    if "$ref" in node:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        resolved = _rewrite(copy.deepcopy(defs[name]), defs)
        for rule in _validations(name):
            resolved.setdefault("x-kubernetes-validations", []).append(rule)
        resolved.update({k: v for k, v in node.items() if k != "$defs"})
        node = resolved
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS or key == "$defs":
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "additionalProperties" and value is False:
            continue
        elif key == "properties":
            out[key] = {k: _rewrite(v, defs) for k, v in value.items()}
        else:
            out[key] = _rewrite(value, defs)
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif "anyOf" in out:
        raise ValueError(f"cannot express a union structurally: {out['anyOf']}")
    if "properties" in out:
        out.setdefault("type", "object")
    return out


def _clean(node: Any, *, in_status: bool = False) -> Any:
    if isinstance(node, list):
        return [_clean(n, in_status=in_status) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if in_status and k == "default":  # status is written by us alone; defaults there only confuse
            continue
        out[k] = _clean(v, in_status=in_status)
    return out


class _FactoryDefaults(GenerateJsonSchema):
    """Publish a nested model's factory default as its schema default.

    An absent optional object then gets its fully defaulted value from the apiserver (which also
    checks that default against the object's CEL rules when the CRD is created).
    """

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            value = factory()  # type: ignore[call-arg]
            if isinstance(value, BaseModel):
                return value.model_dump(by_alias=True, exclude_none=True, mode="json")
            return NoDefault
        return super().get_default_value(schema)


def schema_of(model: type[Any], *, in_status: bool = False) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one model, with its own CEL rules on top."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_FactoryDefaults)
    defs = raw.pop("$defs", {})
    rewritten = _rewrite(raw, defs)
    for rule in _validations(model.__name__):
        rewritten.setdefault("x-kubernetes-validations", []).append(rule)
    cleaned: dict[str, Any] = _clean(rewritten, in_status=in_status)
    return cleaned


def open_api_schema() -> dict[str, Any]:
    """The CRD's `openAPIV3Schema` for InferencePool."""
    return {
        "type": "object",
        "description": (api.InferencePool.__doc__ or "").strip(),
        "required": ["spec"],
        "x-kubernetes-validations": [api.NAME_RULE.as_validation()],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation of an object.",
            },
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource."},
            "metadata": {"type": "object"},
            "spec": schema_of(api.InferencePoolSpec),
            "status": schema_of(api.InferencePoolStatus, in_status=True),
        },
    }


def custom_resource_definition() -> dict[str, Any]:
    """The complete `apiextensions.k8s.io/v1` CustomResourceDefinition."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{api.PLURAL}.{api.GROUP}",
            "labels": {"app.kubernetes.io/name": "semipd-operator", "app.kubernetes.io/part-of": "semipd"},
        },
        "spec": {
            "group": api.GROUP,
            "names": {
                "kind": api.KIND,
                "listKind": f"{api.KIND}List",
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "shortNames": list(api.SHORT_NAMES),
                "categories": list(api.CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": open_api_schema()},
                }
            ],
        },
    }


def crd_filename() -> str:
    """File name under `crds/`, kubebuilder style."""
    return f"{api.GROUP}_{api.PLURAL}.yaml"
