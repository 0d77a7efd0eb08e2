"""An evaluation waits for its pool's pods to be listed, but never for ever."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from semipd.controller import autoscale


def test_the_hold_lasts_while_listing_and_ends_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(autoscale.time, "monotonic", lambda: clock[0])
    ctx = SimpleNamespace(listing_since={})
    key = ("ns", "p")
    assert autoscale._still_listing(ctx, key, "3 of 10 listed")
    clock[0] += autoscale.LISTING_HOLD_S - 1.0
    assert autoscale._still_listing(ctx, key, "3 of 10 listed")
    clock[0] += 2.0
    assert not autoscale._still_listing(ctx, key, "3 of 10 listed")  # a pod that lost our labels
    assert not autoscale._still_listing(ctx, key, None)
    assert ctx.listing_since == {}
    assert autoscale._still_listing(ctx, key, "listing again after a re-list")  # the bound starts afresh
