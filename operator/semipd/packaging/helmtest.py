"""`semipd chart-test`: what the chart's `helm test` hook runs, inside the cluster.

Passes when the InferencePool CRD is served (API discovery lists `inferencepools` with short name
`sipool`) and the operator answers: its Ready pod's liveness endpoint returns 200 and its metrics
endpoint serves `semipd_` series, both on the pod's IP (found with the hook's own Role: get/list
pods), as Prometheus scrapes it; no Service routing is assumed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

GROUP, VERSION, PLURAL, SHORT = "semipd.io", "v1alpha1", "inferencepools", "sipool"


def _ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp or pod.status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def check_crd(custom: Any) -> str | None:
    """None when the CRD is served, else what is wrong."""
    resources = custom.get_api_resources(GROUP, VERSION).resources
    served = {r.name: r for r in resources}
    if PLURAL not in served:
        return f"{GROUP}/{VERSION} does not serve {PLURAL} (served: {sorted(served)})"
    if SHORT not in (served[PLURAL].short_names or []):
        return f"{PLURAL}.{GROUP} has no short name {SHORT}"
    return None


def _url(ip: str, port: int, path: str) -> str:
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}/{path}"


def check_operator(core: Any, namespace: str, selector: str, liveness_port: int, metrics_port: int) -> str | None:
    """None when a Ready operator pod answers on its liveness and metrics ports, else what is wrong."""
    import httpx

    pods = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items if _ready(p)]
    if not pods:
        return f"no Ready operator pod in {namespace} with labels {selector}"
    pod = pods[0]
    try:
        health = httpx.get(_url(pod.status.pod_ip, liveness_port, "healthz"), timeout=10)
        metrics = httpx.get(_url(pod.status.pod_ip, metrics_port, "metrics"), timeout=10)
    except httpx.HTTPError as err:
        return f"pod {pod.metadata.name} ({pod.status.pod_ip}) does not answer: {err}"
    if health.status_code != 200:
        return f"pod {pod.metadata.name}: /healthz answered {health.status_code}"
    if metrics.status_code != 200 or "semipd_" not in metrics.text:
        return f"pod {pod.metadata.name}: /metrics answered {metrics.status_code} without semipd_ series"
    return None


def main(argv: Sequence[str] | None = None, prog: str = "semipd chart-test") -> int:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    from semipd.cliargs import Parser, positive_duration

    p = Parser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--namespace", required=True, help="the release's namespace")
    p.add_argument("--selector", required=True, help="label selector of the operator pod")
    p.add_argument("--liveness-port", type=int, default=8081, help="the operator's liveness port")
    p.add_argument("--metrics-port", type=int, default=8080, help="the operator's metrics port")
    p.add_argument("--timeout", type=positive_duration, default="2m", help="keep retrying this long")
    args = p.parse_args(argv)
    config.load_incluster_config()  # type: ignore[no-untyped-call]  # the hook pod's own ServiceAccount
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    deadline = time.monotonic() + args.timeout
    problem: str | None = "not checked"
    while time.monotonic() < deadline:
        try:
            problem = check_crd(custom) or check_operator(
                core, args.namespace, args.selector, args.liveness_port, args.metrics_port
            )
        except ApiException as err:
            problem = f"API {err.status} {err.reason}: {str(err.body)[:200]}"
        if problem is None:
            print(f"ok: {PLURAL}.{GROUP} is served and the operator answers")
            return 0
        time.sleep(2)
    print(f"{prog}: FAILED: {problem}", file=sys.stderr)
    return 1
