"""Lint a CRD schema against the apiserver's structural-schema rules and our own bounds policy.

The apiserver refuses non-structural schemas and CEL rules whose cost it cannot bound; this linter
finds the same problems offline (and a few of our own: every string, list and map bounded) so a
drift in the pydantic models fails unit tests before it reaches a cluster.
"""

from __future__ import annotations

from typing import Any

_FORBIDDEN = {"$ref", "$defs", "definitions", "const", "prefixItems", "uniqueItems", "propertyNames", "title"}
_VALUE_ONLY = {"anyOf", "allOf", "oneOf", "not"}


def lint_schema(schema: dict[str, Any], path: str = "") -> list[str]:
    """Return every structural or bounds violation under `schema` (empty list = clean)."""
    problems: list[str] = []
    _walk(schema, path or "<root>", problems, in_metadata=False)
    return problems


def _walk(node: dict[str, Any], path: str, problems: list[str], *, in_metadata: bool) -> None:
    for key in _FORBIDDEN & node.keys():
        problems.append(f"{path}: '{key}' is not allowed in a structural schema")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if "type" not in node and not (int_or_string or preserve):
        problems.append(f"{path}: every node needs a type")
    if node.get("type") == "null":
        problems.append(f"{path}: type null is not allowed; use nullable")
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(node.get("exclusiveMinimum"), bool):
        problems.append(f"{path}: exclusiveMinimum must be a boolean in OpenAPI v3")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties are mutually exclusive")
    if node.get("additionalProperties") is False:
        problems.append(f"{path}: additionalProperties: false is forbidden (unknown fields are pruned)")
    for key in _VALUE_ONLY & node.keys():
        members = node[key] if isinstance(node[key], list) else [node[key]]
        for m in members:
            if "type" in m and not int_or_string:
                problems.append(f"{path}.{key}: may carry value validations only, not types")
    _check_list_map(node, path, problems)
    _check_bounds(node, path, problems, in_metadata=in_metadata)
    for rule in node.get("x-kubernetes-validations", []):
        if not rule.get("rule"):
            problems.append(f"{path}: CEL rule is empty")
        if "\n" in rule.get("message", ""):
            problems.append(f"{path}: CEL message must be a single line")
    for name, child in node.get("properties", {}).items():
        # Every object carries apiVersion/kind/metadata; the apiserver bounds those itself.
        exempt = in_metadata or (path == "<root>" and name in {"apiVersion", "kind", "metadata"})
        _walk(child, f"{path}.{name}", problems, in_metadata=exempt)
    if isinstance(node.get("items"), dict):
        _walk(node["items"], f"{path}[]", problems, in_metadata=in_metadata)
    if isinstance(node.get("additionalProperties"), dict):
        _walk(node["additionalProperties"], f"{path}{{}}", problems, in_metadata=in_metadata)


def _check_list_map(node: dict[str, Any], path: str, problems: list[str]) -> None:
    keys = node.get("x-kubernetes-list-map-keys")
    if keys is None:
        return
    if node.get("x-kubernetes-list-type") != "map":
        problems.append(f"{path}: list-map-keys need x-kubernetes-list-type: map")
    items = node.get("items", {})
    required = set(items.get("required", []))
    for key in keys:
        prop = items.get("properties", {}).get(key)
        if prop is None or prop.get("type") not in {"string", "integer", "boolean"}:
            problems.append(f"{path}: list-map key {key!r} must be a scalar property of the items")
        elif key not in required and "default" not in prop:
            problems.append(f"{path}: list-map key {key!r} must be required or defaulted")


def _check_bounds(node: dict[str, Any], path: str, problems: list[str], *, in_metadata: bool) -> None:
    if in_metadata:
        return
    kind = node.get("type")
    if kind == "string" and "enum" not in node and "maxLength" not in node:
        problems.append(f"{path}: string without maxLength (unbounded CEL cost)")
    if kind == "array" and "maxItems" not in node:
        problems.append(f"{path}: array without maxItems")
    if kind == "object" and isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node:
        problems.append(f"{path}: map without maxProperties")
