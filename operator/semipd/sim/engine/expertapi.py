"""The simulated engine's expert-location API on its control socket, modelled on SGLang's EPLB update.

SGLang's EPLB manager computes a new ExpertLocationMetadata and calls `update_expert_location`,
which copies expert weights between ranks layer chunk by layer chunk while serving continues. Here:
  GET /v1/expert-location[?map=true]  -> the placement in force (version, shape, balancedness)
  PUT /v1/expert-location {"version": n, "physical_to_logical_map": [[...], ...]}
      -> 200 with the new state once in force; 400 bad map, 409 stale version or a rebalance
         already running, 404 for a dense model
The copy takes moved slots x expert bytes / LINK_BYTES_PER_S model seconds; tokens routed before
the switch completes count under the old map.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from semipd.sim.engine.experts import LINK_BYTES_PER_S, ExpertPlacement, PlacementError, StaleVersion

ROUTE = "/v1/expert-location"


class ExpertLocationApi:
    """Control-API handlers over one engine's placement (None for a dense model or a bad topology)."""

    def __init__(
        self,
        placement: ExpertPlacement | None,
        routed_tokens: Callable[[], float],
        expert_bytes_per_layer: float,
        speedup: float,
        unavailable: str = "",
    ) -> None:
        self.placement = placement
        self.routed_tokens = routed_tokens
        self.expert_bytes = expert_bytes_per_layer
        self.speedup = speedup
        self.unavailable = unavailable or "this engine serves a dense model"
        self.busy = False

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(ROUTE, self.get)
        app.router.add_put(ROUTE, self.put)

    def move_seconds(self, slots: int) -> float:
        """Model seconds to copy `slots` expert slots (one layer's expert each) over one link."""
        return slots * self.expert_bytes / LINK_BYTES_PER_S

    async def get(self, request: web.Request) -> web.Response:
        if self.placement is None:
            return web.json_response({"error": self.unavailable}, status=404)
        with_map = request.query.get("map", "").lower() in ("1", "true", "yes")
        return web.json_response({**self.placement.to_json(with_map), "rebalancing": self.busy})

    async def put(self, request: web.Request) -> web.Response:
        placement = self.placement
        if placement is None:
            return web.json_response({"error": self.unavailable}, status=404)
        try:
            doc = await request.json()
        except ValueError:
            return web.json_response({"error": "body is not valid JSON"}, status=400)
        if not isinstance(doc, dict) or set(doc) != {"version", "physical_to_logical_map"}:
            return web.json_response(
                {"error": 'body must be {"version": n, "physical_to_logical_map": [[...], ...]}'}, status=400
            )
        if self.busy:
            return web.json_response({"error": "a rebalance is already running"}, status=409)
        try:
            version, table = placement.check(doc["version"], doc["physical_to_logical_map"])
        except PlacementError as e:
            return web.json_response({"error": str(e)}, status=400)
        except StaleVersion as e:
            return web.json_response({"error": str(e)}, status=409)
        self.busy = True
        try:
            await asyncio.sleep(self.move_seconds(placement.moved_slots(table)) / self.speedup)
            placement.apply(version, table, self.routed_tokens())
        finally:
            self.busy = False
        return web.json_response({**placement.to_json(), "rebalancing": False})
