"""Which owned objects to apply and which to delete, as a pure function of intent and cache.

An intent is applied when its live copy is missing or no longer carries it (drift, or a new
spec); Secrets are not watched (least privilege), so for them "already applied" means the same
intent digest was applied by this process. Owned objects nobody intends any more are pruned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semipd.controller.cache import Key
from semipd.controller.drift import carries
from semipd.desired.workload import intent_digest

UNWATCHED = {"v1/Secret"}


def kind_key(body: Mapping[str, Any]) -> str:
    """`apiVersion/Kind`: distinguishes our InferencePool from the GIE one."""
    return f"{body['apiVersion']}/{body['kind']}"


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body["metadata"]
    return (kind_key(body), meta["namespace"], meta["name"])


@dataclass(frozen=True)
class ChildPlan:
    """What one reconcile writes."""

    apply: list[dict[str, Any]]
    prune: list[Key]


def plan_children(
    desired: Sequence[dict[str, Any]],
    live: Mapping[Key, dict[str, Any]],
    owned: Iterable[Key],
    applied_digests: Mapping[Key, str],
) -> ChildPlan:
    """Intents to apply (missing or drifted) and owned keys to delete (no longer desired)."""
    to_apply = []
    wanted = set()
    for intent in desired:
        key = key_of(intent)
        wanted.add(key)
        if key[0] in UNWATCHED:
            if applied_digests.get(key) != intent_digest(intent):
                to_apply.append(intent)
            continue
        current = live.get(key)
        if current is None or not carries(intent, current):
            to_apply.append(intent)
    prune = sorted(k for k in owned if k not in wanted and k[0] not in UNWATCHED)
    return ChildPlan(to_apply, prune)
