"""The decode owner's internal control API (HTTP over a unix socket in the run dir): schema and client.

The schema types are shared: the simulated engine serialises its state with them and the agent
parses it with them, so there is one definition of the contract. Routes:
  GET  /v1/state                      -> EngineState
  POST /v1/workers/{id}/activate      -> {"active": id, "previous": id|null}   (409 if not ready)
  PUT  /v1/decode-share {"percent": y} -> {"decodePercent": y}                 (after the swap)
  POST /v1/drain                      -> {"admitting": false, "inflightRequests": n}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from semipd.agent import httpwire


class ControlError(RuntimeError):
    """The control API refused a call or could not be reached."""


@dataclass(frozen=True)
class WorkerInfo:
    id: int
    percent: int
    ready: bool
    inflight_batches: int
    pid: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "percent": self.percent,
            "ready": self.ready,
            "inflightBatches": self.inflight_batches,
            "pid": self.pid,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> WorkerInfo:
        return cls(
            int(doc["id"]), int(doc["percent"]), bool(doc["ready"]), int(doc["inflightBatches"]), int(doc["pid"])
        )


@dataclass(frozen=True)
class EngineState:
    admitting: bool
    active_worker: int | None
    decode_percent: int
    inflight_requests: int
    workers: tuple[WorkerInfo, ...] = field(default_factory=tuple)

    def worker(self, worker_id: int) -> WorkerInfo | None:
        return next((w for w in self.workers if w.id == worker_id), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "admitting": self.admitting,
            "activeWorker": self.active_worker,
            "decodePercent": self.decode_percent,
            "inflightRequests": self.inflight_requests,
            "workers": [w.to_json() for w in self.workers],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> EngineState:
        active = doc["activeWorker"]
        return cls(
            bool(doc["admitting"]),
            None if active is None else int(active),
            int(doc["decodePercent"]),
            int(doc["inflightRequests"]),
            tuple(WorkerInfo.from_json(w) for w in doc["workers"]),
        )


class ControlClient:
    def __init__(self, socket_path: str, timeout: float = 10.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    async def _call(self, method: str, target: str, payload: Any = None, timeout: float | None = None) -> Any:
        try:
            resp = await httpwire.request_unix(
                self.socket_path, method, target, payload, timeout=timeout or self.timeout
            )
        except (OSError, httpwire.HttpError, *httpwire.TIMEOUT_ERRORS) as e:
            raise ControlError(f"{method} {target} on {self.socket_path} failed: {e!r}") from e
        try:
            doc = resp.json()
        except ValueError as e:
            raise ControlError(f"{method} {target}: status {resp.status}, body is not JSON") from e
        if resp.status != 200:
            message = doc.get("error") if isinstance(doc, dict) else doc
            raise ControlError(f"{method} {target}: status {resp.status}: {message}")
        return doc

    async def state(self) -> EngineState:
        return EngineState.from_json(await self._call("GET", "/v1/state"))

    async def activate(self, worker_id: int) -> None:
        await self._call("POST", f"/v1/workers/{worker_id}/activate")

    async def set_decode_share(self, percent: int, timeout: float) -> None:
        await self._call("PUT", "/v1/decode-share", {"percent": percent}, timeout=timeout)

    async def drain(self) -> int:
        doc = await self._call("POST", "/v1/drain")
        return int(doc["inflightRequests"])
