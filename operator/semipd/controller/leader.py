"""Leader election on a coordination.k8s.io Lease, around the whole Kopf operator.

A candidate waits (serving its liveness endpoint, so the kubelet keeps it) until it holds the Lease,
then runs Kopf; a daemon thread renews every retry period. A leader that cannot renew within the
renew deadline exits at once (as controller-runtime does): a process that may no longer be the only
leader must not make one more decision, and the kubelet restarts it as a standby. On a clean stop it
releases the Lease so the standby takes over without waiting out the lease duration.

Writes use the resourceVersion read, so of two candidates racing for an expired Lease only one wins.
The Lease carries the managed-by label; one of that name without it is someone else's, never taken.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from semipd.controller import metrics
from semipd.controller.lease import LeaseRecord, claim, released
from semipd.desired.names import MANAGED_BY

log = logging.getLogger("semipd.leader")
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"


def default_identity() -> str:
    """The pod name (POD_NAME from the chart's downward API, else HOSTNAME) and the pid: unique per
    process, and `kubectl get lease` says which pod leads."""
    pod = os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{pod}_{os.getpid()}"


def _record(lease: client.V1Lease) -> LeaseRecord:
    spec = lease.spec or client.V1LeaseSpec()
    return LeaseRecord(
        holder=spec.holder_identity or None,
        duration_s=int(spec.lease_duration_seconds or 0),
        acquired=spec.acquire_time,
        renewed=spec.renew_time,
        transitions=int(spec.lease_transitions or 0),
    )


def _spec(record: LeaseRecord) -> client.V1LeaseSpec:
    return client.V1LeaseSpec(
        holder_identity=record.holder,
        lease_duration_seconds=record.duration_s,
        acquire_time=record.acquired,
        renew_time=record.renewed,
        lease_transitions=record.transitions,
    )


class ForeignLease(RuntimeError):
    """A Lease of our name exists that the operator did not create."""


class LeaderElector:
    """Acquires, renews and releases one Lease for this process."""

    def __init__(self, namespace: str, name: str, identity: str, duration_s: float, renew_deadline_s: float,
                 retry_period_s: float, request_timeout_s: float) -> None:  # fmt: skip
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
        self.api = client.CoordinationV1Api()
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration_s = max(1, round(duration_s))
        self.renew_deadline_s, self.retry_period_s = renew_deadline_s, retry_period_s
        self.timeout = request_timeout_s
        self.last_renewed = -float("inf")
        self._seen: tuple[LeaseRecord, float] | None = None
        self._stop = threading.Event()

    def _unchanged_for(self, record: LeaseRecord) -> float:
        """Seconds this process has seen exactly this record (its own clock: skew-proof)."""
        now = time.monotonic()
        if self._seen is None or self._seen[0] != record:
            self._seen = (record, now)
        return now - self._seen[1]

    def try_acquire(self) -> bool:
        """One read and at most one write: True when this process holds the Lease afterwards."""
        now = datetime.now(UTC)
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
        except ApiException as e:
            if e.status != 404:
                raise
            new = claim(None, self.identity, now, self.duration_s)
            assert new is not None
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, labels={MANAGED_BY_LABEL: MANAGED_BY}), spec=_spec(new)
            )
            return self._write(lambda: self.api.create_namespaced_lease(self.namespace, body,
                                                                        _request_timeout=self.timeout))  # fmt: skip
        if ((lease.metadata and lease.metadata.labels) or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
            raise ForeignLease(f"Lease {self.namespace}/{self.name} exists without {MANAGED_BY_LABEL}={MANAGED_BY}; "
                               "set SEMIPD_LEASE_NAME to another name")  # fmt: skip
        record = _record(lease)
        new = claim(record, self.identity, now, self.duration_s, self._unchanged_for(record))
        if new is None:
            return False
        lease.spec = _spec(new)
        # The resourceVersion read goes back with the write: a racing candidate gets 409.
        return self._write(lambda: self.api.replace_namespaced_lease(self.name, self.namespace, lease,
                                                                     _request_timeout=self.timeout))  # fmt: skip

    def _write(self, call: Callable[[], object]) -> bool:
        try:
            call()
        except ApiException as e:
            if e.status in (409, 422):
                return False  # another candidate wrote first
            raise
        self.last_renewed = time.monotonic()
        return True

    def acquire(self) -> None:
        """Block until this process holds the Lease (API errors are logged and retried)."""
        waiting_logged = False
        while True:
            try:
                if self.try_acquire():
                    log.info("leading: holding Lease %s/%s as %s", self.namespace, self.name, self.identity)
                    metrics.LEADER.set(1)
                    return
                if not waiting_logged:
                    log.info("standby: Lease %s/%s is held by another operator", self.namespace, self.name)
                    waiting_logged = True
            except ForeignLease:
                raise
            except Exception as e:  # the apiserver is down or slow: keep waiting, say why
                log.warning("leader election: %s", e)
            time.sleep(self.retry_period_s)

    def keep_renewing(self, on_lost: Callable[[], None]) -> threading.Thread:
        """Renew every retry period in a daemon thread; `on_lost` when the renew deadline passes."""

        def loop() -> None:
            while not self._stop.wait(self.retry_period_s):
                try:
                    held = self.try_acquire()
                except Exception as e:
                    log.warning("renewing the leader Lease failed: %s", e)
                    held = time.monotonic() - self.last_renewed < self.renew_deadline_s
                if not held or time.monotonic() - self.last_renewed >= self.renew_deadline_s:
                    metrics.LEADER.set(0)
                    log.error("lost the leader Lease %s/%s; exiting so that only one operator acts",
                              self.namespace, self.name)  # fmt: skip
                    on_lost()
                    return

        thread = threading.Thread(target=loop, name="lease-renewal", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Step down on a clean stop (best effort: the Lease expires anyway)."""
        self._stop.set()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
            new = released(_record(lease), self.identity)
            if new is not None:
                lease.spec = _spec(new)
                self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=self.timeout)
                log.info("released the leader Lease %s/%s", self.namespace, self.name)
        except Exception as e:
            log.warning("releasing the leader Lease failed (it expires on its own): %s", e)
        metrics.LEADER.set(0)


class StandbyLiveness:
    """The liveness endpoint while waiting for the Lease: 200 `standby`, so the kubelet keeps a standby
    (Kopf's own endpoint takes the port over once this process leads)."""

    def __init__(self, endpoint: str) -> None:
        url = urlsplit(endpoint)
        path = url.path or "/"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code, body = (200, b"standby\n") if self.path.split("?")[0] == path else (404, b"")
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((url.hostname or "127.0.0.1", url.port or 80), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="standby-liveness", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
