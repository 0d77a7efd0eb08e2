"""Prometheus instant queries from async code: prometheus-api-client in a worker thread, bounded.

The client is synchronous and has no default timeout, so every call runs via `asyncio.to_thread`
with a server-side and client-side timeout and a bounded retry, inside `asyncio.wait_for`. One
client per Prometheus URL, guarded by a lock (its thread-safety is unverified). Every way an answer
can fail (no answer in time, refused, an HTTP error, a reply that is not JSON or not an instant
vector) becomes a MetricsError whose `fault` names it; the caller then holds (fail-static).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from typing import Any

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import RequestException, RetryError
from requests.exceptions import Timeout as RequestsTimeout
from urllib3.exceptions import MaxRetryError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3TimeoutError
from urllib3.util.retry import Retry

TIMEOUT = "PrometheusTimeout"
UNREACHABLE = "PrometheusUnreachable"
HTTP_ERROR = "PrometheusHTTPError"
MALFORMED = "PrometheusMalformedReply"
WRONG_TYPE = "PrometheusWrongResultType"
NOT_ALLOWED = "PrometheusURLNotAllowed"
FAULTS = (TIMEOUT, UNREACHABLE, HTTP_ERROR, MALFORMED, WRONG_TYPE, NOT_ALLOWED)
"""Condition reasons for a metrics source that did not answer usefully (CamelCase, metav1-style)."""


class MetricsError(RuntimeError):
    """The metrics source could not answer (down, timeout, bad query); `fault` is one of FAULTS."""

    def __init__(self, message: str, *, fault: str = UNREACHABLE) -> None:
        super().__init__(f"{fault}: {message}")
        self.fault = fault


def fault_of(err: BaseException) -> str:
    """Which fault an exception from the client means."""
    if isinstance(err, TimeoutError | RequestsTimeout):
        return TIMEOUT
    if isinstance(err, RetryError | PrometheusApiClientException):
        return HTTP_ERROR  # a status outside 2xx (5xx after the retry)
    if isinstance(err, RequestsConnectionError):
        # A read timeout that used up the retry surfaces as a ConnectionError around MaxRetryError.
        inner = err.args[0] if err.args else None
        reason = inner.reason if isinstance(inner, MaxRetryError) else None
        # (urllib3's NewConnectionError, a refusal, subclasses its timeout error.)
        if isinstance(reason, Urllib3TimeoutError) and not isinstance(reason, NewConnectionError):
            return TIMEOUT
        return UNREACHABLE
    if isinstance(err, ValueError | KeyError | TypeError):
        return MALFORMED  # not JSON, or JSON without data.result
    return UNREACHABLE


def instant_vector(result: Any) -> list[tuple[Series, Any]]:
    """(labels, raw value) per sample of an instant-vector result; raises MetricsError otherwise."""
    if not isinstance(result, list):
        raise MetricsError(f"result is a {type(result).__name__}, not an instant vector", fault=WRONG_TYPE)
    out = []
    for item in result:
        value = item.get("value") if isinstance(item, dict) else None
        labels = item.get("metric", {}) if isinstance(item, dict) else None
        if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
            raise MetricsError("result items are not instant-vector samples", fault=WRONG_TYPE)
        out.append(({str(k): str(v) for k, v in labels.items()}, value[1]))
    return out


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

    def _query(self, promql: str) -> Any:
        with self._lock:
            return self._client.custom_query(promql, params={"timeout": f"{self._timeout:g}s"}, timeout=self._timeout)

    def _describe(self, fault: str, err: BaseException) -> str:
        if fault == TIMEOUT:
            return f"no answer within {self._timeout:g}s"
        return failure_summary(err)

    async def query(self, promql: str) -> list[tuple[Series, float | None]]:
        """(labels, value) per series of an instant vector; raises MetricsError when Prometheus cannot answer."""
        try:
            result = await asyncio.wait_for(asyncio.to_thread(self._query, promql), timeout=3 * self._timeout)
        except (TimeoutError, RequestException, PrometheusApiClientException, ValueError, KeyError, TypeError) as err:
            fault = fault_of(err)
            raise MetricsError(f"{self.url}: {self._describe(fault, err)}", fault=fault) from None
        return [(labels, sample_value(raw)) for labels, raw in instant_vector(result)]
