"""Kopf wiring: settings, watches and thin handlers that all funnel into `reconcile()`.

Every handler names the `semipd.io` group explicitly (the Gateway API Inference Extension also has
a kind called InferencePool). No timers or daemons: they would make Kopf add a finalizer to every
InferencePool; an operator-wide resync task gives the same level-based guarantee without one.
Every handler is a coroutine: Kopf runs sync handlers in worker threads, where mutating the watch
caches (which the loop iterates) or setting an asyncio.Event would race with the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import kopf

from semipd.api.v1alpha1 import GROUP, PLURAL, VERSION
from semipd.controller import metrics
from semipd.controller.agents import AgentClient
from semipd.controller.autoscale import autoscale_forever
from semipd.controller.config import OperatorConfig
from semipd.controller.kube import ChildClient, EventRecorder, PoolClient, new_api_client
from semipd.controller.leader import LeaderElector, StandbyLiveness, default_identity
from semipd.controller.liveness import Liveness, heartbeat_forever, known_intervals, list_one_pool
from semipd.controller.reconcile import OperatorContext, node_info, reconcile, resync_forever
from semipd.controller.tokens import load_key
from semipd.desired.names import MANAGED_BY, POOL_LABEL
from semipd.desired.workload import WorkloadSettings
from semipd.engines.capabilities import capabilities_of

GIE_CRD = "inferencepools.inference.networking.k8s.io"
HTTPROUTE_CRD = "httproutes.gateway.networking.k8s.io"
CHILD_KINDS = (
    ("apps", "v1", "deployments", "apps/v1/Deployment"),
    ("", "v1", "services", "v1/Service"),
    ("policy", "v1", "poddisruptionbudgets", "policy/v1/PodDisruptionBudget"),
    ("inference.networking.k8s.io", "v1", "inferencepools", "inference.networking.k8s.io/v1/InferencePool"),
    ("gateway.networking.k8s.io", "v1", "httproutes", "gateway.networking.k8s.io/v1/HTTPRoute"),
    ("", "v1", "pods", "v1/Pod"),
)

log = logging.getLogger("semipd.operator")
WATCH_LIST_PAGE = 500


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """Our own storage prefixes and finite network timeouts (see docs/operations.md)."""
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.peering.standalone = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    # Initial lists in pages: one 5,000-pod list parsed at once was the restarted operator's RSS peak
    # (610 MB in the 500-pool soak); a page is parsed, cached slim, and dropped before the next.
    settings.watching.chunk_size = WATCH_LIST_PAGE
    settings.networking.connect_timeout = 10
    settings.networking.request_timeout = 60
    settings.execution.max_workers = 8


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    """All handlers of the operator, registered on a dedicated registry."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # A dedicated registry gets none of Kopf's default login handlers; use the client's config.
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure_settings(settings)
        api = await new_api_client(config.api_timeout)
        agents = AgentClient()

        async def close() -> None:
            await agents.close()
            await api.close()  # type: ignore[no-untyped-call]

        ctx = OperatorContext(
            config=config,
            pools=PoolClient(api),
            children=ChildClient(api, config.field_manager),
            events=EventRecorder(api, config.field_manager),
            agents=agents,
            capabilities_of=capabilities_of,
            token_key=load_key(config.token_key_file),
            settings=WorkloadSettings(
                operator_image=config.operator_image,
                termination_grace_seconds=config.termination_grace_seconds,
                pod_annotations=dict(config.pod_annotations),
            ),
            close=close,
            liveness=Liveness(stale_after=config.stale_after),
        )
        memo["ctx"] = ctx
        heartbeat = list_one_pool(api, config.namespaces, config.api_timeout)
        memo["heartbeat"] = asyncio.create_task(heartbeat_forever(ctx.liveness, heartbeat, config.api_timeout, log))
        memo["resync"] = asyncio.create_task(resync_forever(ctx, log))
        memo["autoscale"] = asyncio.create_task(autoscale_forever(ctx, log))

    @kopf.on.cleanup(registry=registry)
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        memo["ctx"].stopping = True  # what fails from now on is the shutdown (apiclient.client_closed)
        memo["resync"].cancel()
        memo["autoscale"].cancel()
        memo["heartbeat"].cancel()
        if memo["ctx"].close is not None:
            await memo["ctx"].close()

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def track_node(event: kopf.RawEvent, body: kopf.Body, name: str, memo: kopf.Memo, **_: Any) -> None:
        memo["ctx"].liveness.saw_api()
        nodes = memo["ctx"].nodes
        if event.get("type") == "DELETED":
            nodes.pop(name, None)
        else:
            nodes[name] = node_info(dict(body))

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def track_pool(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
    ) -> None:
        memo["ctx"].liveness.saw_api()
        bodies = memo["ctx"].pool_bodies
        if namespace is None:
            return
        if event.get("type") == "DELETED":
            bodies.pop((namespace, name), None)
        else:
            bodies[(namespace, name)] = dict(body)

    @kopf.on.event(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        registry=registry,
        when=lambda name, **_: name in (GIE_CRD, HTTPROUTE_CRD),
    )
    async def track_gie_crd(event: kopf.RawEvent, name: str, memo: kopf.Memo, **_: Any) -> None:
        ctx: OperatorContext = memo["ctx"]
        ctx.liveness.saw_api()
        installed = event.get("type") != "DELETED"
        flag = "gie_installed" if name == GIE_CRD else "httproute_installed"
        if installed != getattr(ctx, flag):
            setattr(ctx, flag, installed)
            for key in ctx.known_pools:
                ctx.poke(*key)

    for group, version, plural, kind in CHILD_KINDS:

        @kopf.on.event(group, version, plural, registry=registry, labels={"app.kubernetes.io/managed-by": MANAGED_BY})
        async def track_child(
            event: kopf.RawEvent,
            body: kopf.Body,
            namespace: str | None,
            name: str,
            labels: kopf.Labels,
            memo: kopf.Memo,
            kind: str = kind,
            **_: Any,
        ) -> None:
            ctx: OperatorContext = memo["ctx"]
            ctx.liveness.saw_api()
            if namespace is None:
                return
            if event.get("type") == "DELETED":
                ctx.cache.drop(kind, namespace, name)
            else:
                ctx.cache.put(kind, dict(body))
            pool = labels.get(POOL_LABEL)
            if pool and (namespace, pool) in ctx.pool_bodies:
                ctx.poke(namespace, pool)

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, registry=registry)
    async def reconcile_pool(
        namespace: str | None, name: str, memo: kopf.Memo, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any
    ) -> None:
        if namespace is not None:
            await reconcile(memo["ctx"], namespace, name, logger)

    @kopf.on.probe(id="lastReconcileAgeSeconds", registry=registry)
    async def reconcile_age(memo: kopf.Memo, **_: Any) -> float:
        ctx: OperatorContext = memo["ctx"]
        now = time.monotonic()
        age = now - ctx.last_success
        problems = ctx.liveness.problems(now, known_intervals(ctx.pool_bodies.items()))
        if ctx.known_pools and age > config.stale_after:
            problems.append(f"no successful reconcile for {age:.0f}s")
        if problems:
            raise kopf.PermanentError("; ".join(problems))
        return round(age, 1)

    return registry


def run(config: OperatorConfig) -> None:
    """Run the operator until interrupted (with leader election: once this process holds the Lease)."""
    debug = config.log_level == "debug"
    kopf.configure(debug=debug, quiet=config.log_level == "warning")
    if not debug:  # Kopf logs every successful handler call at INFO; ours log what matters themselves.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # every liveness probe otherwise
    logging.getLogger("semipd.leader").setLevel(logging.INFO)
    metrics.serve(config.metrics_host, config.metrics_port)  # a standby is scraped too (semipd_leader 0)
    elector = None
    if config.leader_election:
        elector = LeaderElector(config.lease_namespace, config.lease_name, default_identity(),
                                config.lease_duration, config.renew_deadline, config.retry_period,
                                config.api_timeout)  # fmt: skip
        standby = StandbyLiveness(config.liveness_endpoint)
        try:
            elector.acquire()
        finally:
            standby.close()
        # os._exit, not an exception: Kopf's loop must not run one more handler once leadership is gone.
        elector.keep_renewing(on_lost=lambda: os._exit(1))
    else:
        metrics.LEADER.set(1)
    try:
        kopf.run(
            registry=build_registry(config),
            standalone=True,
            clusterwide=not config.namespaces,
            namespaces=config.namespaces,
            liveness_endpoint=config.liveness_endpoint,
            memo=kopf.Memo(),
        )
    finally:
        if elector is not None:
            elector.release()
