"""Kubernetes API access for the operator: one async client, the few calls reconcile needs.

Kopf watches and dispatches; writes go through this client so that handlers and the resync loop
share one path (and, later, one server-side-apply field manager).
"""

from __future__ import annotations

import os
from typing import Any, cast

from kubernetes.aio import client, config

from semipd.api.v1alpha1 import GROUP, PLURAL, VERSION


async def new_api_client() -> client.ApiClient:
    """In-cluster credentials inside a pod, else $KUBECONFIG / ~/.kube/config."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
    return client.ApiClient()


class PoolClient:
    """Reads and status-patches InferencePools."""

    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The live object, or None if it is gone."""
        try:
            obj = await self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast(dict[str, Any], obj)

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch `.status` through the status subresource."""
        await self._custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )
