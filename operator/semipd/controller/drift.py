"""Does a live object still carry our apply intent? A pure, field-by-field subset comparison.

The apiserver adds defaults and other managers' fields, so equality is wrong; every field we set
must be present with our value. Resource quantities are compared by value (`1000m` == `1`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity


def quantity(value: object) -> Decimal | None:
    """A Kubernetes quantity as a number (kubernetes.utils.parse_quantity), or None if it is not one."""
    try:
        parsed: Decimal = parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, ArithmeticError):
        return None
    return parsed


def _is_zero(value: Any) -> bool:
    # The apiserver omits zero values (Go's omitempty), so a missing field equals false/0/""/[]/{}.
    return value is False or value == 0 or value in ("", [], {})


def carries(intent: Any, live: Any, *, quantities: bool = False) -> bool:
    """True when every field of `intent` is in `live` with the same value."""
    if isinstance(intent, dict):
        if not isinstance(live, dict):
            return False
        return all(
            carries(v, live[k], quantities=quantities or k in {"requests", "limits"}) if k in live else _is_zero(v)
            for k, v in intent.items()
        )
    if isinstance(intent, list):
        if not isinstance(live, list) or len(intent) != len(live):
            return False
        return all(carries(a, b, quantities=quantities) for a, b in zip(intent, live, strict=True))
    if quantities and intent != live:
        a, b = quantity(intent), quantity(live)
        return a is not None and a == b
    return bool(intent == live)
