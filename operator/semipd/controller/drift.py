"""Does a live object still carry our apply intent? A pure, field-by-field subset comparison.

The apiserver adds defaults and other managers' fields, so equality is wrong; every field we set
must be present with our value. Resource quantities are compared by value (`1000m` == `1`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([a-zA-Z]*)$")


def quantity(value: object) -> Decimal | None:
    """A Kubernetes quantity as a number, or None if it is not one."""
    m = _QUANTITY.match(str(value))
    if not m or m.group(2) not in _SUFFIX:
        return None
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2)]
    except ArithmeticError:
        return None


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
