"""The simulated engine's internal control API (unix socket, used by the agent): engine state,
activate a prefill worker, change the decode share (modelled as an in-process standby swap), drain.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from semipd.sim.engine.owner import DecodeOwner


class ControlApi:
    """The control routes of one decode owner."""

    def __init__(self, owner: DecodeOwner) -> None:
        self.owner = owner
        self._decode_changing = False

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/state", self._control_state)
        app.router.add_post("/v1/workers/{wid}/activate", self._control_activate)
        app.router.add_put("/v1/decode-share", self._control_decode_share)
        app.router.add_post("/v1/drain", self._control_drain)
        self.owner.expert_api.add_routes(app)
        return app

    async def _control_state(self, request: web.Request) -> web.Response:
        return web.json_response(self.owner.state().to_json())

    async def _control_activate(self, request: web.Request) -> web.Response:
        try:
            wid = int(request.match_info["wid"])
        except ValueError:
            return web.json_response({"error": "worker id must be an integer"}, status=400)
        worker = self.owner.workers.get(wid)
        if worker is None:
            return web.json_response({"error": f"worker {wid} is not attached"}, status=404)
        if not worker.ready:
            return web.json_response({"error": f"worker {wid} is attached but not ready"}, status=409)
        previous = self.owner.activate(wid)
        return web.json_response({"active": wid, "previous": previous})

    async def _control_decode_share(self, request: web.Request) -> web.Response:
        try:
            doc = await request.json()
            percent = doc["percent"]
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'body must be {"percent": <1..100>}'}, status=400)
        if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 100:
            return web.json_response({"error": "percent must be an integer in 1..100"}, status=400)
        if self._decode_changing:
            return web.json_response({"error": "a decode share change is already in progress"}, status=409)
        self._decode_changing = True
        try:
            return await self._change_decode_share(percent)
        finally:
            self._decode_changing = False

    async def _change_decode_share(self, percent: int) -> web.Response:
        # The decode side swaps like the prefill side (a standby decode worker with the new share
        # comes up, then takes over at an iteration boundary); here that is modelled in-process.
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await asyncio.sleep(self.owner.model.switch_cost() / self.owner.cfg.speedup)
        self.owner._pending_decode = (percent, done)
        if not self.owner.running and not self.owner.joining:
            self.owner._apply_pending_decode()
        self.owner._decode.set()
        await done
        return web.json_response({"decodePercent": self.owner.decode_percent})

    async def _control_drain(self, request: web.Request) -> web.Response:
        self.owner.admitting = False
        return web.json_response({"admitting": False, "inflightRequests": self.owner.open_generations})
