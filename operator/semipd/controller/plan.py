"""Which owned objects to apply and which to delete, as a pure function of intent and cache.

An intent is applied when its live copy is missing or no longer carries it (drift, or a new
spec); Secrets are not watched (least privilege), so for them "already applied" means the same
intent digest was applied by this process. Owned objects nobody intends any more are pruned.

Ownership comes before any write: an existing object is ours only when it carries our managed-by
label and a controller ownerReference to this InferencePool. Anything else is a conflict, left
untouched, unless its owner opted in with the ADOPT_ANNOTATION on that object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semipd.controller.cache import Key
from semipd.controller.drift import carries
from semipd.desired.names import MANAGED_BY
from semipd.desired.workload import intent_digest

UNWATCHED = {"v1/Secret"}
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
ADOPT_ANNOTATION = "semipd.io/adopt"
"""Set to the adopting InferencePool's name on an existing object to let the operator take it over."""


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


def ours(body: Mapping[str, Any], owner_uid: str) -> bool:
    """Our managed-by label and a controller ownerReference to this InferencePool."""
    meta = body.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    return (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY and any(
        r.get("uid") == owner_uid and r.get("controller") and r.get("kind") == "InferencePool" for r in refs
    )


def conflict_with(live: Mapping[str, Any] | None, owner_uid: str, pool: str) -> str | None:
    """Why an existing object must not be written (None: absent, ours, or opted in for adoption)."""
    if live is None or ours(live, owner_uid):
        return None
    meta = live.get("metadata") or {}
    if (meta.get("annotations") or {}).get(ADOPT_ANNOTATION) == pool:
        return None
    what = f"{live.get('kind', 'object')} {meta.get('namespace', '')}/{meta.get('name', '')}"
    return conflict_message(what, pool, adoptable=True)


def conflict_message(what: str, pool: str, *, adoptable: bool) -> str:
    """The Degraded message: which object, and the two ways out."""
    fix = "rename or delete it, or rename the InferencePool"
    if adoptable:
        fix += f", or annotate it {ADOPT_ANNOTATION}={pool} to let the operator take it over"
    return f"{what} exists and is not managed by this InferencePool; it was left untouched ({fix})"
