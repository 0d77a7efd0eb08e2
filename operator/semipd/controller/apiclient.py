"""An async Kubernetes API client whose every request has a finite timeout.

kubernetes.aio falls back to a 300 s timeout for a request that names none, so one frozen
apiserver connection could hold a pool's reconcile (and every pool behind it) for five minutes.
"""

from __future__ import annotations

from typing import Any

from kubernetes.aio import client


class TimedApiClient(client.ApiClient):
    """ApiClient that gives each request `request_timeout` seconds unless the call sets its own."""

    def __init__(self, request_timeout: float, configuration: Any = None) -> None:
        super().__init__(configuration)
        self.request_timeout = request_timeout

    async def call_api(
        self,
        method: str,
        url: str,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
        _preload_content: bool = True,
    ) -> Any:
        timeout = _request_timeout if _request_timeout is not None else self.request_timeout
        return await super().call_api(method, url, header_params, body, post_params, timeout, _preload_content)


def client_closed(err: BaseException, stopping: bool = False) -> bool:
    """A call cut off by the operator's own shutdown: the API client's HTTP session was closed under
    it, or it failed once the operator had begun to stop (a request in flight when the session closes
    ends as aiohttp's ServerDisconnectedError, not "Session is closed")."""
    return stopping or (isinstance(err, RuntimeError) and "Session is closed" in str(err))
