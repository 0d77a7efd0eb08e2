"""Prometheus instant queries from async code: prometheus-api-client in a worker thread, bounded.

The client is synchronous and has no default timeout, so every call runs via `asyncio.to_thread`
with a server-side and client-side timeout and a bounded retry, inside `asyncio.wait_for`. One
client per Prometheus URL, guarded by a lock (its thread-safety is unverified).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from collections.abc import Mapping
from typing import Any

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.exceptions import RequestException
from urllib3.util.retry import Retry


class MetricsError(RuntimeError):
    """The metrics source could not answer (down, timeout, bad query)."""


Series = dict[str, str]


def sample_value(raw: Any) -> float | None:
    """A Prometheus sample value as a float; NaN and +-Inf are unknown (None)."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def failure_summary(err: BaseException) -> str:
    """What failed, never what the server said: a response body may carry anything (it lands in status)."""
    if isinstance(err, TimeoutError):
        return "timed out"
    if isinstance(err, PrometheusApiClientException):
        code = re.search(r"HTTP Status Code (\d{3})", str(err))
        return f"HTTP {code.group(1)}" if code else "error response"
    if isinstance(err, ValueError):  # requests' JSONDecodeError is both
        return "unparseable response"
    return f"request failed ({type(err).__name__})"


class PrometheusSource:
    """Instant queries against one Prometheus."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self._timeout = timeout_s
        retry = Retry(total=1, backoff_factor=0.2, status_forcelist=[502, 503, 504])
        self._client = PrometheusConnect(url=url, retry=retry, timeout=timeout_s)
        self._lock = threading.Lock()

    def _query(self, promql: str) -> list[dict[str, Any]]:
        with self._lock:
            result: list[dict[str, Any]] = self._client.custom_query(
                promql, params={"timeout": f"{self._timeout:g}s"}, timeout=self._timeout
            )
            return result

    async def query(self, promql: str) -> list[tuple[Series, float | None]]:
        """(labels, value) per series of an instant vector; raises MetricsError when Prometheus cannot answer."""
        try:
            result = await asyncio.wait_for(asyncio.to_thread(self._query, promql), timeout=3 * self._timeout)
        except (TimeoutError, RequestException, PrometheusApiClientException, ValueError) as err:
            raise MetricsError(f"{self.url}: {failure_summary(err)}") from None
        out = []
        for item in result:
            labels: Mapping[str, str] = item.get("metric", {})
            value = item.get("value", [None, None])
            out.append((dict(labels), sample_value(value[1] if len(value) > 1 else None)))
        return out
