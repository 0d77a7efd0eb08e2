"""Which Prometheus a pool's autoscaler queries: the operator's default, or an allow-listed override.

`spec.autoscaling.prometheusURL` is written by whoever may edit an InferencePool, and the operator
fetches it from inside the cluster: unchecked, that is a server-side request forgery. An override is
honoured only when it lies under an entry of the operator's allow-list (empty by default); otherwise
the pool's queries fail with a message naming the field, without a request. Clients are kept in a
small LRU cache so a stream of distinct URLs cannot grow the operator's memory.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from urllib.parse import urlsplit

from semipd.observe.prometheus import NOT_ALLOWED, MetricsError, PrometheusSource, Series

MAX_CLIENTS = 16


class RefusedSource(PrometheusSource):
    """Stands in for a Prometheus the operator may not query: every query fails, with no request."""

    def __init__(self, url: str, reason: str) -> None:  # no client: nothing may be sent
        self.url = url
        self.reason = reason

    async def query(self, promql: str) -> list[tuple[Series, float | None]]:
        raise MetricsError(self.reason, fault=NOT_ALLOWED)


def _parts(url: str) -> tuple[str, str, int | None, str]:
    p = urlsplit(url)
    try:
        port = p.port or {"http": 80, "https": 443}.get(p.scheme)
    except ValueError:
        port = None
    return p.scheme, (p.hostname or "").lower(), port, p.path.rstrip("/")


def allowed(url: str, allow_list: Sequence[str]) -> bool:
    """`url` has an entry's scheme, host and port, and its path lies under the entry's path."""
    scheme, host, port, path = _parts(url)
    if not host or port is None or "@" in urlsplit(url).netloc:
        return False  # userinfo in a URL is a classic way to disguise the real host
    for entry in allow_list:
        e_scheme, e_host, e_port, e_path = _parts(entry)
        if (scheme, host, port) == (e_scheme, e_host, e_port) and (path == e_path or path.startswith(e_path + "/")):
            return True
    return False


def choose_source(
    cache: MutableMapping[str, PrometheusSource],
    override: str | None,
    default_url: str,
    allow_list: Sequence[str],
    new: Callable[[str], PrometheusSource] = PrometheusSource,
) -> PrometheusSource:
    """The source for a pool: `override` when allow-listed, a RefusedSource when not, else the default."""
    url = override or default_url
    if override and override != default_url and not allowed(override, allow_list):
        return RefusedSource(
            override,
            "spec.autoscaling.prometheusURL is not in the operator's allow-list "
            "(chart value operator.prometheusAllowedURLs); remove it to use the operator's Prometheus",
        )
    source = cache.pop(url, None) or new(url)
    cache[url] = source  # most recently used last
    while len(cache) > MAX_CLIENTS:
        cache.pop(next(iter(cache)))
    return source
