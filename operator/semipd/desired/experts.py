"""The expert-placement ConfigMap of one node pool, and reading it back (pure).

One ConfigMap per (InferencePool, node pool), `<pool>-<node pool>-experts`, owned by the
InferencePool: our versioned envelope (`placement.json`), SGLang's `--init-expert-location` JSON
and, when the map is anti-affine, vllm-ascend's expert map (semipd.policy.experts.formats). The
version is a label and the write time an annotation, so the version survives an operator restart
and `kubectl get cm -l semipd.io/expert-placement-version` finds every map. Engines that read a
map only at start-up get it through a rolling restart: a pod-template annotation with the version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from semipd.api.v1alpha1 import GROUP
from semipd.desired import names
from semipd.desired.owner import Owner
from semipd.policy.experts.formats import PLACEMENT_KEY, ExpertPlacementDoc, FormatError, configmap_data

VERSION_LABEL = f"{GROUP}/expert-placement-version"
"""On the ConfigMap: the placement version it holds. On pod templates (annotation): the version the
pods were started with, for engines that read the map at start-up."""
WRITTEN_ANNOTATION = f"{GROUP}/expert-placement-written"
ALGORITHM_ANNOTATION = f"{GROUP}/expert-placement-algorithm"


def configmap_name(pool: str, node_pool: str) -> str:
    """The expert-placement ConfigMap of one node pool."""
    return f"{pool}-{node_pool}-experts"


def expert_configmap(
    owner: Owner,
    node_pool: str,
    doc: ExpertPlacementDoc,
    *,
    written_at: str,
    num_layers: int | None = None,
    first_moe_layer: int = 0,
) -> dict[str, Any]:
    """The ConfigMap (server-side-apply intent) holding `doc` in every engine format it fits.

    vllm-ascend's map cannot list one expert twice on a device, so a map that stacks replicas
    (EPLB's can) ships without it. Raises FormatError when the bundle exceeds the 1 MiB limit.
    """
    try:
        data = configmap_data(doc, num_layers=num_layers, first_moe_layer=first_moe_layer)
    except FormatError as err:
        if "lists an expert twice" not in str(err):
            raise
        data = configmap_data(doc, num_layers=num_layers, first_moe_layer=first_moe_layer, vllm_ascend=False)
    labels = {**names.pool_labels(owner.name), names.NODE_POOL_LABEL: node_pool, VERSION_LABEL: str(doc.version)}
    annotations = {WRITTEN_ANNOTATION: written_at, ALGORITHM_ANNOTATION: doc.algorithm}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owner.metadata(configmap_name(owner.name, node_pool), labels, annotations),
        "data": data,
    }


@dataclass(frozen=True)
class StoredPlacement:
    """A placement read back from its ConfigMap."""

    doc: ExpertPlacementDoc
    written_at: str | None


def read_configmap(body: Mapping[str, Any]) -> StoredPlacement:
    """The placement a ConfigMap holds; FormatError when it is not one of ours or is inconsistent."""
    meta = body.get("metadata") or {}
    text = (body.get("data") or {}).get(PLACEMENT_KEY)
    if not isinstance(text, str):
        raise FormatError(f"ConfigMap {meta.get('name')} has no {PLACEMENT_KEY}")
    doc = ExpertPlacementDoc.from_json(text)
    label = (meta.get("labels") or {}).get(VERSION_LABEL)
    if label is not None and label != str(doc.version):
        raise FormatError(f"ConfigMap {meta.get('name')}: label version {label} differs from {doc.version}")
    written = (meta.get("annotations") or {}).get(WRITTEN_ANNOTATION)
    return StoredPlacement(doc, written if isinstance(written, str) else None)


def rollout_intent(owner: Owner, node_pool: str, version: int) -> dict[str, Any]:
    """A partial Deployment apply that sets only the pod-template version annotation.

    Applied under its own field manager, it survives the reconciler's applies of the full
    Deployment (which do not own the field), and changing it rolls the pods under the Deployment's
    strategy (maxSurge 1, maxUnavailable 0) while the PodDisruptionBudget bounds evictions.
    """
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names.workload_name(owner.name, node_pool), "namespace": owner.namespace},
        "spec": {"template": {"metadata": {"annotations": {VERSION_LABEL: str(version)}}}},
    }


def pods_at_version(pods: Sequence[Mapping[str, Any]], version: int) -> int:
    """How many of `pods` were started with placement `version` (pod annotation)."""
    return sum(
        1 for p in pods if ((p.get("metadata") or {}).get("annotations") or {}).get(VERSION_LABEL) == str(version)
    )
