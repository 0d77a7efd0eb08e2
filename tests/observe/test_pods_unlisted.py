"""A pool's pod cache is trusted only once it holds what its Deployments count (restart listing)."""

from __future__ import annotations

from typing import Any

from semipd.observe.fleet import pods_unlisted


def _pod(ready: bool) -> dict[str, Any]:
    cond = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": [cond]}}


def _deployment(ready: int) -> dict[str, Any]:
    return {"metadata": {"name": "d"}, "status": {"readyReplicas": ready} if ready else {}}


def test_a_node_pool_whose_deployment_is_not_cached_is_still_listing() -> None:
    why = pods_unlisted({"h200": None}, {"h200": []})
    assert why is not None
    assert "h200" in why


def test_fewer_ready_pods_cached_than_the_deployment_counts_is_still_listing() -> None:
    why = pods_unlisted({"h200": _deployment(10)}, {"h200": [_pod(True)] * 3 + [_pod(False)] * 7})
    assert why == "3 of node pool h200's 10 Ready pods listed yet"


def test_cache_matching_or_ahead_of_the_deployment_status_is_trusted() -> None:
    assert pods_unlisted({"h200": _deployment(2)}, {"h200": [_pod(True), _pod(True)]}) is None
    assert pods_unlisted({"h200": _deployment(1)}, {"h200": [_pod(True), _pod(True)]}) is None
    assert pods_unlisted({"h200": _deployment(0)}, {}) is None  # a new pool: nothing Ready to wait for


def test_every_node_pool_must_be_listed() -> None:
    deps = {"h200": _deployment(1), "ascend": _deployment(2)}
    why = pods_unlisted(deps, {"h200": [_pod(True)], "ascend": [_pod(True)]})
    assert why is not None
    assert "ascend" in why
