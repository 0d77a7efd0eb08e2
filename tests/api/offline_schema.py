"""An offline stand-in for the apiserver's CRD validation, for unit tests only.

It applies structural defaults, validates with JSON Schema (OpenAPI v3 keywords the CRD uses) and
evaluates every CEL rule with cel-python. The e2e suite checks the same cases on a real apiserver.
"""

from __future__ import annotations

import copy
from typing import Any

import celpy
import jsonschema


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """Fill defaults the way the apiserver does: absent properties with a default get it, recursively."""
    obj = copy.deepcopy(obj)
    if isinstance(obj, dict) and "properties" in schema:
        for name, prop in schema["properties"].items():
            if name not in obj and "default" in prop:
                obj[name] = copy.deepcopy(prop["default"])
            if name in obj:
                obj[name] = apply_defaults(prop, obj[name])
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        obj = [apply_defaults(schema["items"], x) for x in obj]
    return obj


def _strip_extensions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_extensions(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
    if isinstance(node, list):
        return [_strip_extensions(x) for x in node]
    return node


def cel_failures(schema: dict[str, Any], obj: Any, path: str = "spec") -> list[str]:
    """Messages of every CEL rule that does not hold, with the path of the node it sits on."""
    out: list[str] = []
    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations", []):
        program = env.program(env.compile(rule["rule"]))
        if not program.evaluate({"self": celpy.json_to_cel(obj)}):
            out.append(f"{path}{rule.get('fieldPath', '')}: {rule['message']}")
    if isinstance(obj, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in obj:
                out += cel_failures(prop, obj[name], f"{path}.{name}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            out += cel_failures(schema["items"], item, f"{path}[{i}]")
    return out


def schema_failures(schema: dict[str, Any], obj: Any) -> list[str]:
    """JSON-schema violations as `path: message` strings."""
    validator = jsonschema.Draft7Validator(_strip_extensions(schema))
    out = []
    for e in validator.iter_errors(obj):
        path = "spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        if e.validator == "required":  # the apiserver names the missing field itself
            path += "." + e.message.split("'")[1]
        out.append(f"{path}: {e.message}")
    return out


def admit(spec_schema: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """What the apiserver would say about `spec`: schema errors first, then (if none) CEL failures."""
    defaulted = apply_defaults(spec_schema, spec)
    errors = schema_failures(spec_schema, defaulted)
    return errors or cel_failures(spec_schema, defaulted)
