"""Expert placement through the agent: validate the operator's envelope, forward it to the engine.

`PUT /v1/experts` takes the versioned envelope of semipd.policy.experts.formats (`format`
semipd.io/expert-placement, `formatVersion` 1, `version`, `layers`, `logicalExperts`,
`physicalSlots`, `devices`, `physicalToLogicalMap`, ...). The agent is standard library only, so
the envelope is checked here without NumPy; a unit test keeps both parsers agreeing. Engines whose
driver has an online expert-location API (the simulated engine's control socket, modelled on
SGLang's update_expert_location) get the map forwarded; others answer 422. `GET /v1/experts`
reports the version in force as the engine states it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from semipd.agent import httpwire
from semipd.agent.runpaths import control_socket
from semipd.agent.supervisor import DRAINING, RESTARTING, STARTING, STOPPED, SWITCHING, Supervisor

FORMAT = "semipd.io/expert-placement"
FORMAT_VERSION = 1
ENGINE_ROUTE = "/v1/expert-location"


class PlacementRequestError(ValueError):
    """A malformed placement envelope (HTTP 400)."""


@dataclass(frozen=True)
class PlacementRequest:
    """The parts of the envelope an engine needs."""

    version: int
    layers: int
    logical_experts: int
    physical_slots: int
    devices: int
    phy2log: list[list[int]]

    def engine_body(self) -> dict[str, Any]:
        """The engine's update body: SGLang's map key plus the version."""
        return {"version": self.version, "physical_to_logical_map": self.phy2log}


def _positive_int(doc: dict[str, Any], name: str) -> int:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlacementRequestError(f"{name} must be an integer >= 1, got {json.dumps(value)}")
    return value


def parse_placement_request(body: bytes) -> PlacementRequest:
    """The placement a `PUT /v1/experts` body carries; raises PlacementRequestError with the reason."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except ValueError as e:  # bad UTF-8, bad JSON, or an integer past Python's digit limit
        raise PlacementRequestError(f"body is not valid JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PlacementRequestError(f"body must be a {FORMAT} document")
    if doc.get("formatVersion") != FORMAT_VERSION:
        raise PlacementRequestError(f"formatVersion {json.dumps(doc.get('formatVersion'))} is not {FORMAT_VERSION}")
    version = _positive_int(doc, "version")
    layers = _positive_int(doc, "layers")
    experts = _positive_int(doc, "logicalExperts")
    slots = _positive_int(doc, "physicalSlots")
    devices = _positive_int(doc, "devices")
    if slots % devices:
        raise PlacementRequestError(f"{slots} physical slots do not split over {devices} devices")
    if slots < experts:
        raise PlacementRequestError(f"{slots} physical slots cannot hold {experts} logical experts")
    table = doc.get("physicalToLogicalMap")
    if not isinstance(table, list) or len(table) != layers:
        raise PlacementRequestError(f"physicalToLogicalMap must have {layers} rows (layers)")
    for layer, row in enumerate(table):
        if not isinstance(row, list) or len(row) != slots:
            raise PlacementRequestError(f"physicalToLogicalMap row {layer} must have {slots} slots")
        for expert in row:
            if isinstance(expert, bool) or not isinstance(expert, int) or not 0 <= expert < experts:
                raise PlacementRequestError(
                    f"layer {layer}: {json.dumps(expert)} is not an expert id in 0..{experts - 1}"
                )
        if len(set(row)) != experts:
            missing = sorted(set(range(experts)) - set(row))[:5]
            raise PlacementRequestError(f"layer {layer}: logical experts {missing} have no physical slot")
    return PlacementRequest(version, layers, experts, slots, devices, table)


class EngineRefused(Exception):
    """The engine answered a placement call with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ExpertLocationClient:
    """The engine side: its expert-location API on the decode owner's control socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path

    async def _call(self, method: str, payload: Any, timeout: float) -> dict[str, Any]:
        resp = await httpwire.request_unix(self.socket_path, method, ENGINE_ROUTE, payload, timeout=timeout)
        try:
            doc = resp.json()
        except ValueError as e:
            raise EngineRefused(502, f"engine answered {resp.status} with a non-JSON body") from e
        if resp.status != 200 or not isinstance(doc, dict):
            message = doc.get("error") if isinstance(doc, dict) else doc
            raise EngineRefused(resp.status, str(message))
        return doc

    async def state(self, timeout: float = 5.0) -> dict[str, Any]:
        return await self._call("GET", None, timeout)

    async def update(self, req: PlacementRequest, timeout: float) -> dict[str, Any]:
        return await self._call("PUT", req.engine_body(), timeout)


@dataclass(frozen=True)
class RebalanceRecord:
    previous: int
    version: int
    duration: float
    finished_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.previous,
            "to": self.version,
            "durationSeconds": round(self.duration, 6),
            "finishedAt": self.finished_at,
        }


class ExpertsEndpoint:
    """`GET`/`PUT /v1/experts` over one supervisor (one rebalance at a time, none during a split change)."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.client = ExpertLocationClient(control_socket(sup.s.run_dir))
        self.busy = False
        self.version: int | None = None
        self.last: RebalanceRecord | None = None
        self.last_error: dict[str, Any] | None = None

    def _unsupported(self) -> str:
        return f"engine {self.sup.driver.kind} has no online expert-location API; its maps can only be read at start-up"

    def _summary(self) -> dict[str, Any]:
        return {
            "engine": self.sup.driver.kind,
            "rebalancing": self.busy,
            "lastRebalance": None if self.last is None else self.last.to_json(),
            "lastError": self.last_error,
            "rebalancesTotal": int(self.sup.metrics.expert_rebalances.value()),
            "failedRebalancesTotal": int(self.sup.metrics.failed_expert_rebalances.value()),
        }

    def _publish(self, doc: dict[str, Any]) -> None:
        version = doc.get("version")
        if isinstance(version, int):
            self.version = version
            self.sup.metrics.expert_placement_version.set(version)

    async def get(self) -> bytes:
        if not self.sup.driver.supports_expert_rebalance:
            return httpwire.json_response(200, {"supported": False, "unsupportedReason": self._unsupported()})
        if not self.sup.ready:
            return _error(503, "NotReady", f"the engine is {self.sup.state}")
        try:
            doc = await self.client.state()
        except EngineRefused as e:
            if e.status == 404:  # a dense model, or experts that do not split over the devices
                return httpwire.json_response(200, {"supported": False, "unsupportedReason": e.message})
            return _error(502, "EngineError", f"engine answered {e.status}: {e.message}")
        except (OSError, httpwire.HttpError, *httpwire.TIMEOUT_ERRORS) as e:
            return _error(502, "EngineUnreachable", f"engine control API unavailable: {e!r}")
        self._publish(doc)
        return httpwire.json_response(200, {"supported": True, **doc, **self._summary()})

    def _rejection(self) -> bytes | None:
        sup = self.sup
        if not sup.driver.supports_expert_rebalance:
            return _error(422, "UnsupportedByEngine", self._unsupported())
        if sup.state == STARTING:
            return _error(409, "NotReady", "the engine is still starting")
        if sup.state in (DRAINING, STOPPED):
            return _error(409, "ShuttingDown", "the agent is shutting down")
        if self.busy:
            return _error(409, "RebalanceInProgress", "an expert rebalance is already running")
        if sup.pending is not None or sup.state in (SWITCHING, RESTARTING):
            return _error(409, "SwitchInProgress", "a split change is running; retry when it is done")
        return None

    async def put(self, body: bytes) -> bytes:
        try:
            req = parse_placement_request(body)
        except PlacementRequestError as e:
            return _error(400, "BadRequest", str(e))
        rejected = self._rejection()
        if rejected is not None:
            return rejected
        self.busy = True
        self.sup.metrics.expert_rebalance_in_progress.set(1)
        started = time.monotonic()
        try:
            before = await self.client.state()
            previous = before.get("version")
            doc = await self.client.update(req, timeout=self.sup.s.switch_timeout)
        except EngineRefused as e:
            return self._failed(e.status if e.status in (400, 404, 409) else 502, req, str(e.message))
        except (OSError, httpwire.HttpError, *httpwire.TIMEOUT_ERRORS) as e:
            return self._failed(502, req, f"engine control API unavailable: {e!r}")
        finally:
            self.busy = False
            self.sup.metrics.expert_rebalance_in_progress.set(0)
        changed = previous != req.version
        self._publish(doc)
        if changed:
            self.sup.metrics.expert_rebalances.inc()
            start = previous if isinstance(previous, int) else 0
            self.last = RebalanceRecord(start, req.version, time.monotonic() - started, time.time())
            self.last_error = None
        return httpwire.json_response(200, {"supported": True, "changed": changed, **doc, **self._summary()})

    def _failed(self, status: int, req: PlacementRequest, message: str) -> bytes:
        self.sup.metrics.failed_expert_rebalances.inc()
        self.last_error = {"message": message, "at": time.time(), "requestedVersion": req.version}
        reason = {400: "RejectedByEngine", 404: "UnsupportedByEngine", 409: "Conflict"}.get(status, "EngineError")
        return _error(status, reason, message)


def _error(status: int, reason: str, message: str) -> bytes:
    return httpwire.json_response(status, {"error": message, "reason": reason})
