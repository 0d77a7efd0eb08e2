"""The operator's client for the in-pod agents' admin API (pods addressed by IP, bearer token).

Reads are best-effort: an agent that does not answer within the timeout is "unknown", never an
error that stops a reconcile. Concurrency is bounded so a large pool cannot flood the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

TIMEOUT = httpx.Timeout(2.0, connect=1.0)


def ready_pod_ips(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """name → pod IP of Running pods whose Ready condition is True."""
    out = {}
    for pod in pods:
        status = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if status.get("phase") == "Running" and ready and status.get("podIP"):
            out[pod["metadata"]["name"]] = status["podIP"]
    return out


class AgentClient:
    """Async admin-API calls to many agents."""

    def __init__(self, concurrency: int = 8) -> None:
        self._http = httpx.AsyncClient(timeout=TIMEOUT)
        self._limit = asyncio.Semaphore(concurrency)

    async def close(self) -> None:
        await self._http.aclose()

    async def _get(self, ip: str, port: int, token: str, path: str) -> dict[str, Any] | None:
        """One agent's JSON document at `path`, or None when it cannot be read."""
        async with self._limit:
            try:
                rsp = await self._http.get(f"http://{ip}:{port}{path}", headers={"Authorization": f"Bearer {token}"})
                doc = rsp.json() if rsp.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                return None
        return doc if isinstance(doc, dict) else None

    async def _put(self, url: str, token: str, ok: tuple[int, ...], **request: Any) -> str | None:
        """PUT with up to three tries; only 409 (another switch or rebalance in progress) is retried.
        None on success, else the last error."""
        last = "no attempt"
        headers = {"Authorization": f"Bearer {token}", **request.pop("headers", {})}
        for attempt in range(3):
            async with self._limit:
                try:
                    rsp = await self._http.put(url, headers=headers, **request)
                except httpx.HTTPError as err:
                    last = f"{type(err).__name__}: {err}"
                else:
                    if rsp.status_code in ok:
                        return None
                    last = f"HTTP {rsp.status_code}: {rsp.text[:200]}"
                    if rsp.status_code != 409:
                        return last
            await asyncio.sleep(0.5 * 2**attempt)
        return last

    async def split(self, ip: str, port: int, token: str) -> tuple[int, int] | None:
        """(prefill, decode) percent of one agent, or None when it cannot be read."""
        doc = await self._get(ip, port, token, "/v1/split")
        if doc is None or not doc.get("supported", True):
            return None
        p, d = doc.get("prefillPercent"), doc.get("decodePercent")
        return (p, d) if isinstance(p, int) and isinstance(d, int) else None

    async def set_split(self, ip: str, port: int, token: str, prefill: int, decode: int) -> str | None:
        """Ask one agent to switch (it answers 202 and swaps in the background); None or the error."""
        body = {"prefillPercent": prefill, "decodePercent": decode}
        return await self._put(f"http://{ip}:{port}/v1/split", token, (200, 202), params={"wait": "false"}, json=body)

    async def experts(self, ip: str, port: int, token: str) -> dict[str, Any] | None:
        """One agent's `GET /v1/experts` (version in force), or None when it cannot be read."""
        return await self._get(ip, port, token, "/v1/experts")

    async def set_experts(self, ip: str, port: int, token: str, envelope: str, timeout: float = 60.0) -> str | None:
        """`PUT /v1/experts` with a placement envelope; waits until the engine has it. None or the error."""
        return await self._put(
            f"http://{ip}:{port}/v1/experts",
            token,
            (200,),
            content=envelope.encode(),
            headers={"Content-Type": "application/json"},
            timeout=httpx.Timeout(timeout, connect=1.0),
        )

    async def splits(self, ips: Mapping[str, str], port: int, token: str) -> dict[str, tuple[int, int]]:
        """Splits of every reachable agent, by pod name."""
        names = list(ips)
        results = await asyncio.gather(*(self.split(ips[n], port, token) for n in names))
        return {n: r for n, r in zip(names, results, strict=True) if r is not None}
