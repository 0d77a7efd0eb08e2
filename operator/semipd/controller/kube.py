"""Kubernetes API access for the operator: one async client, the few calls reconcile needs.

Kopf watches and dispatches; writes go through this client so that handlers and the resync loop
share one path (and, later, one server-side-apply field manager).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes.aio import client, config
from kubernetes.aio.dynamic import DynamicClient
from kubernetes.aio.dynamic.exceptions import ConflictError, NotFoundError

from semipd.api.v1alpha1 import GROUP, PLURAL, VERSION
from semipd.controller import metrics
from semipd.controller.apiclient import TimedApiClient

log = logging.getLogger(__name__)


async def new_api_client(request_timeout: float = 30.0) -> client.ApiClient:
    """In-cluster credentials inside a pod, else $KUBECONFIG / ~/.kube/config; every request times
    out after `request_timeout` seconds unless it sets its own."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
    return TimedApiClient(request_timeout)


class PoolClient:
    """Reads and status-patches InferencePools."""

    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The live object, or None if it is gone."""
        try:
            metrics.API_REQUESTS.labels(verb="get", kind="InferencePool").inc()
            obj = await self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast(dict[str, Any], obj)

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        """Merge-patch `.status` through the status subresource; False if the pool is gone."""
        metrics.API_REQUESTS.labels(verb="patch-status", kind="InferencePool").inc()
        try:
            await self._custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": status},
                _content_type="application/merge-patch+json",
            )
        except client.ApiException as err:
            if err.status == 404:
                return False
            raise
        return True


class ChildClient:
    """Server-side apply and delete for owned objects of any kind, counting every API request."""

    def __init__(self, api: client.ApiClient, field_manager: str) -> None:
        self._api = api
        self._dynamic: DynamicClient | None = None
        self._field_manager = field_manager

    async def _resource(self, api_version: str, kind: str) -> Any:
        if self._dynamic is None:
            self._dynamic = await DynamicClient(self._api)  # type: ignore[no-untyped-call]
        return await self._dynamic.resources.get(api_version=api_version, kind=kind)

    async def apply(self, body: dict[str, Any], *, manager_suffix: str = "") -> dict[str, Any]:
        """Server-side apply `body` under our field manager, taking over conflicting fields.

        A `manager_suffix` applies under a second manager: its fields survive applies of the full
        object that do not carry them (the expert-placement rollout annotation)."""
        resource = await self._resource(body["apiVersion"], body["kind"])
        metrics.API_REQUESTS.labels(verb="apply", kind=body["kind"]).inc()
        assert self._dynamic is not None
        live = await self._dynamic.server_side_apply(  # type: ignore[no-untyped-call]
            resource, body=body, field_manager=self._field_manager + manager_suffix, force_conflicts=True
        )
        return cast(dict[str, Any], live.to_dict())

    async def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create `body`; None when an object of that name already exists (a 409 carries none of its data).

        The first write of an object goes through here, not through apply: an apply would merge
        into whatever already sits under that name."""
        resource = await self._resource(body["apiVersion"], body["kind"])
        metrics.API_REQUESTS.labels(verb="create", kind=body["kind"]).inc()
        assert self._dynamic is not None
        try:
            live = await self._dynamic.create(  # type: ignore[no-untyped-call]
                resource, body=body, namespace=body["metadata"]["namespace"], field_manager=self._field_manager
            )
        except ConflictError:
            return None
        return cast(dict[str, Any], live.to_dict())

    async def find(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """An object of a watched kind by name, whoever made it (list with a field selector: the list verb)."""
        resource = await self._resource(api_version, kind)
        metrics.API_REQUESTS.labels(verb="list", kind=kind).inc()
        assert self._dynamic is not None
        found = await self._dynamic.get(  # type: ignore[no-untyped-call]
            resource, namespace=namespace, field_selector=f"metadata.name={name}"
        )
        items = found.to_dict().get("items") or []
        if not items:
            return None
        item = cast(dict[str, Any], items[0])
        item.setdefault("kind", kind)
        return item

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One object of a kind the operator does not watch, or None if it does not exist."""
        resource = await self._resource(api_version, kind)
        metrics.API_REQUESTS.labels(verb="get", kind=kind).inc()
        assert self._dynamic is not None
        try:
            live = await self._dynamic.get(resource, name=name, namespace=namespace)  # type: ignore[no-untyped-call]
        except NotFoundError:
            return None
        return cast(dict[str, Any], live.to_dict())

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete one object (foreground is not needed: its own children are garbage-collected)."""
        resource = await self._resource(api_version, kind)
        metrics.API_REQUESTS.labels(verb="delete", kind=kind).inc()
        assert self._dynamic is not None
        try:
            await self._dynamic.delete(resource, name=name, namespace=namespace)  # type: ignore[no-untyped-call]
        except NotFoundError:
            return


class EventRecorder:
    """Posts core/v1 Events about an InferencePool (works from any task, unlike Kopf's poster)."""

    def __init__(self, api: client.ApiClient, component: str) -> None:
        self._core = client.CoreV1Api(api)
        self._component = component

    async def post(self, body: dict[str, Any], type: str, reason: str, message: str) -> None:
        """Record one Event; failures are logged, never raised (Events are best-effort)."""
        meta = body["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"),
                "kind": body.get("kind", "InferencePool"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        metrics.API_REQUESTS.labels(verb="create", kind="Event").inc()
        try:
            model = client.CoreV1Event.from_dict(event)
            assert model is not None
            await self._core.create_namespaced_event(meta["namespace"], model)
        except (client.ApiException, ValueError) as err:
            log.warning("could not post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], err)
