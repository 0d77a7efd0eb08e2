"""Render the InferencePool API reference (docs/api-reference.md) from the generated CRD schema.

The same schema `kubectl explain` reads, so the reference cannot drift from the models (a unit test
regenerates it and compares).
"""

from __future__ import annotations

from typing import Any

from semipd.api.crd import open_api_schema


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    kind = str(node.get("type", "object"))
    if kind == "array":
        return f"[]{_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map[string]{_type(node['additionalProperties'])}"
    return kind


def _constraints(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append(" \\| ".join(f"`{v}`" for v in node["enum"]))
    for key, label in (("minimum", "≥"), ("maximum", "≤"), ("minItems", "min items"), ("maxItems", "max items"),
                       ("maxLength", "max length")):  # fmt: skip
        if key in node:
            parts.append(f"{label} {node[key]}")
    if "pattern" in node and "enum" not in node:
        parts.append("pattern")
    return ", ".join(parts)


def _rows(node: dict[str, Any], path: str, required: set[str], out: list[str]) -> None:
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        default = child.get("default")
        shown = "" if default is None or isinstance(default, dict) else f"`{default}`"
        desc = str(child.get("description", "")).replace("\n", " ").replace("|", "\\|")
        req = "yes" if name in required else ""
        out.append(f"| `{here}` | {_type(child)} | {req} | {shown} | {_constraints(child)} | {desc} |")
        target = child.get("items", {}) if child.get("type") == "array" else child
        if "properties" in target:
            _rows(target, here + ("[]" if child.get("type") == "array" else ""), set(target.get("required", [])), out)


def reference_markdown() -> str:
    """The whole reference page."""
    schema = open_api_schema()
    lines = [
        "# InferencePool API reference (`semipd.io/v1alpha1`)",
        "",
        "Generated from `operator/semipd/api/v1alpha1.py` by `semipd crds` — do not edit. Cross-field rules "
        "(CEL) are listed per object in `crds/semipd.io_inferencepools.yaml` and explained in docs/api.md.",
        "",
    ]
    for section in ("spec", "status"):
        node = schema["properties"][section]
        lines += [f"## {section}", "", "| field | type | required | default | constraints | description |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        _rows(node, section, set(node.get("required", [])), lines)
        lines.append("")
    return "\n".join(lines)
