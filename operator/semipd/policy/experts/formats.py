"""Expert maps as engines read them, and expert load as the simulated engine exports it (pure).

Out: SGLang's `--init-expert-location` JSON (`{"physical_to_logical_map": [layer][slot]}`, one row
per transformer layer, nothing else in the object because SGLang passes its keys on as keyword
arguments), vllm-ascend's expert-map JSON (`moe_layer_count`, `layer_list[].device_list[]
.device_expert`, one row per MoE layer), and our own versioned envelope that carries the
placement with its provenance. `configmap_data` bundles all three for one pool.

In: the Prometheus text exposition of `semipd_sim_expert_tokens_total{layer,expert}` (or any
per-(layer, expert) samples, e.g. a PromQL `increase(...)` vector) into the [layers, experts]
weight matrix the placement policies take.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from semipd.policy.experts.layout import FloatArray, IntArray

FORMAT = "semipd.io/expert-placement"
FORMAT_VERSION = 1
"""Schema version of the envelope; bump on incompatible changes."""
SIM_EXPERT_COUNTER = "semipd_sim_expert_tokens_total"

PLACEMENT_KEY = "placement.json"
SGLANG_KEY = "sglang-init-expert-location.json"
VLLM_ASCEND_KEY = "vllm-ascend-expert-map.json"
CONFIGMAP_LIMIT = 1 << 20
"""Kubernetes caps a ConfigMap at 1 MiB."""


class FormatError(ValueError):
    """A document does not have the shape its format requires."""


def _as_map(phy2log: IntArray | Sequence[Sequence[int]]) -> IntArray:
    arr = np.asarray(phy2log)
    if arr.ndim != 2 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer) or arr.min() < 0:
        raise FormatError("a map is a non-empty [layers][slots] table of logical expert ids >= 0")
    return arr.astype(np.int64)


def _int_table(value: Any, what: str) -> IntArray:
    if not isinstance(value, list) or not value or not all(isinstance(row, list) and row for row in value):
        raise FormatError(f"{what} must be a non-empty list of non-empty lists")
    width = len(value[0])
    if any(len(row) != width for row in value):
        raise FormatError(f"{what} rows differ in length")
    if not all(isinstance(x, int) and not isinstance(x, bool) for row in value for x in row):
        raise FormatError(f"{what} must hold integers")
    return _as_map(value)


# --------------------------------------------------------------------------- SGLang


def sglang_expert_location(
    phy2log: IntArray | Sequence[Sequence[int]],
    num_logical: int,
    *,
    num_layers: int | None = None,
    first_moe_layer: int = 0,
) -> str:
    """`--init-expert-location` JSON for SGLang.

    SGLang's map has one row per transformer layer (`num_hidden_layers`), dense ones included. With
    `num_layers`, rows first_moe_layer .. get the placement and every other row the trivial map
    (slot s holds expert s % num_logical); without it the rows are the MoE layers themselves.
    """
    moe = _as_map(phy2log)
    rows = moe
    if num_layers is not None:
        if not 0 <= first_moe_layer <= num_layers - moe.shape[0]:
            raise FormatError(f"{moe.shape[0]} MoE layers from {first_moe_layer} do not fit {num_layers} layers")
        rows = np.tile(np.arange(moe.shape[1]) % num_logical, (num_layers, 1))
        rows[first_moe_layer : first_moe_layer + moe.shape[0]] = moe
    if rows.max() >= num_logical:
        raise FormatError(f"map refers to expert {rows.max()} of {num_logical}")
    return json.dumps({"physical_to_logical_map": rows.tolist()}, separators=(",", ":"))


def parse_sglang_expert_location(text: str, *, first_moe_layer: int = 0, moe_layers: int | None = None) -> IntArray:
    """The [layers][slots] map of an SGLang `--init-expert-location` JSON (optionally only MoE rows)."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or set(doc) != {"physical_to_logical_map"}:
        raise FormatError("expected an object with exactly the key physical_to_logical_map")
    table = _int_table(doc["physical_to_logical_map"], "physical_to_logical_map")
    end = table.shape[0] if moe_layers is None else first_moe_layer + moe_layers
    if end > table.shape[0]:
        raise FormatError(f"map has {table.shape[0]} layers, asked for rows up to {end}")
    return table[first_moe_layer:end]


# --------------------------------------------------------------------------- vllm-ascend


def vllm_ascend_expert_map(phy2log: IntArray | Sequence[Sequence[int]], num_devices: int) -> str:
    """vllm-ascend's expert-map JSON: per MoE layer, per device (NPU die), its experts in slot order.

    A device listing one expert twice is rejected: the engine indexes a device's experts by id.
    """
    table = _as_map(phy2log)
    layers, slots = table.shape
    if slots % num_devices:
        raise FormatError(f"{slots} slots do not split over {num_devices} devices")
    grid = table.reshape(layers, num_devices, -1)
    for layer in range(layers):
        for device in range(num_devices):
            experts = grid[layer, device].tolist()
            if len(set(experts)) != len(experts):
                raise FormatError(f"layer {layer} device {device} lists an expert twice: {experts}")
    doc = {
        "moe_layer_count": layers,
        "layer_list": [
            {
                "layer_id": layer,
                "device_count": num_devices,
                "device_list": [
                    {"device_id": device, "device_expert": grid[layer, device].tolist()}
                    for device in range(num_devices)
                ],
            }
            for layer in range(layers)
        ],
    }
    return json.dumps(doc, separators=(",", ":"))


def parse_vllm_ascend_expert_map(text: str) -> tuple[IntArray, int]:
    """(phy2log [layers][slots] with slots device-major, number of devices) of a vllm-ascend map."""
    doc = json.loads(text)
    try:
        layers = doc["layer_list"]
        count = doc["moe_layer_count"]
        if not isinstance(layers, list) or count != len(layers):
            raise FormatError(f"moe_layer_count {count} does not match {len(layers)} layers")
        rows: list[list[int]] = []
        devices = None
        for expected_id, layer in enumerate(layers):
            if layer.get("layer_id", expected_id) != expected_id:
                raise FormatError(f"layer_list[{expected_id}] has layer_id {layer['layer_id']}")
            device_list = layer["device_list"]
            if layer.get("device_count", len(device_list)) != len(device_list):
                raise FormatError(f"layer {expected_id}: device_count does not match device_list")
            ids = [d.get("device_id", i) for i, d in enumerate(device_list)]
            if ids != list(range(len(device_list))):
                raise FormatError(f"layer {expected_id}: device ids {ids} are not 0..{len(device_list) - 1}")
            if devices is None:
                devices = len(device_list)
            elif devices != len(device_list):
                raise FormatError("layers differ in device count")
            rows.append([e for d in device_list for e in d["device_expert"]])
    except (KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"not a vllm-ascend expert map: {exc}") from exc
    assert devices is not None
    table = _int_table(rows, "device_expert")
    if table.shape[1] % devices:
        raise FormatError("devices hold different numbers of experts")
    return table, devices


# --------------------------------------------------------------------------- our envelope


@dataclass(frozen=True)
class ExpertPlacementDoc:
    """One pool's placement with its provenance, as stored next to the engine maps."""

    version: int
    """Placement generation for the pool, increasing with every rebalance."""
    phy2log: IntArray
    num_logical: int
    num_devices: int
    algorithm: str
    pool: str = ""
    balancedness_before: float | None = None
    balancedness_after: float | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = {
            "format": FORMAT,
            "formatVersion": FORMAT_VERSION,
            "version": self.version,
            "pool": self.pool,
            "algorithm": self.algorithm,
            "layers": int(self.phy2log.shape[0]),
            "logicalExperts": self.num_logical,
            "physicalSlots": int(self.phy2log.shape[1]),
            "devices": self.num_devices,
            "balancednessBefore": self.balancedness_before,
            "balancednessAfter": self.balancedness_after,
            "extra": dict(self.extra),
            "physicalToLogicalMap": self.phy2log.tolist(),
        }
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ExpertPlacementDoc:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise FormatError(f"not a {FORMAT} document")
        if doc.get("formatVersion") != FORMAT_VERSION:
            raise FormatError(f"formatVersion {doc.get('formatVersion')} is not {FORMAT_VERSION}")
        table = _int_table(doc["physicalToLogicalMap"], "physicalToLogicalMap")
        if table.shape != (doc["layers"], doc["physicalSlots"]) or table.shape[1] % doc["devices"]:
            raise FormatError("physicalToLogicalMap does not match layers, physicalSlots and devices")
        if table.max() >= doc["logicalExperts"]:
            raise FormatError("physicalToLogicalMap refers to an expert beyond logicalExperts")
        return cls(
            version=int(doc["version"]),
            phy2log=table,
            num_logical=int(doc["logicalExperts"]),
            num_devices=int(doc["devices"]),
            algorithm=str(doc["algorithm"]),
            pool=str(doc.get("pool", "")),
            balancedness_before=doc.get("balancednessBefore"),
            balancedness_after=doc.get("balancednessAfter"),
            extra={str(k): str(v) for k, v in doc.get("extra", {}).items()},
        )


def configmap_data(
    doc: ExpertPlacementDoc, *, num_layers: int | None = None, first_moe_layer: int = 0, vllm_ascend: bool = True
) -> dict[str, str]:
    """ConfigMap data for one pool: our envelope plus the engine maps (vllm-ascend's when anti-affine).

    `num_layers` and `first_moe_layer` place the MoE rows in SGLang's per-transformer-layer map.
    Raises FormatError when the bundle would exceed the 1 MiB ConfigMap limit.
    """
    data = {
        PLACEMENT_KEY: doc.to_json(),
        SGLANG_KEY: sglang_expert_location(
            doc.phy2log, doc.num_logical, num_layers=num_layers, first_moe_layer=first_moe_layer
        ),
    }
    if vllm_ascend:
        data[VLLM_ASCEND_KEY] = vllm_ascend_expert_map(doc.phy2log, doc.num_devices)
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_LIMIT:
        raise FormatError(f"placement ConfigMap would be {size} bytes, over the 1 MiB limit")
    return data


# --------------------------------------------------------------------------- expert load in


def load_matrix(
    samples: Iterable[tuple[Mapping[str, str], float]], *, layers: int | None = None, experts: int | None = None
) -> FloatArray:
    """[layers, experts] token counts from (labels, value) samples with `layer` and `expert` labels.

    Samples of one (layer, expert) are summed (several pods, or other labels such as model_name).
    Shape is taken from the largest ids unless given; a missing cell is an error, not a zero, since
    an expert the engine did not report has unknown load.
    """
    cells: dict[tuple[int, int], float] = {}
    for labels, value in samples:
        try:
            key = (int(labels["layer"]), int(labels["expert"]))
        except (KeyError, ValueError) as exc:
            raise FormatError(f"sample without integer layer/expert labels: {dict(labels)}") from exc
        if key[0] < 0 or key[1] < 0:
            raise FormatError(f"negative layer or expert id in {dict(labels)}")
        if not np.isfinite(value) or value < 0:
            raise FormatError(f"token count {value} for layer {key[0]} expert {key[1]} is not a count")
        cells[key] = cells.get(key, 0.0) + float(value)
    if not cells:
        raise FormatError("no expert load samples")
    n_layers = layers if layers is not None else 1 + max(k[0] for k in cells)
    n_experts = experts if experts is not None else 1 + max(k[1] for k in cells)
    matrix = np.full((n_layers, n_experts), np.nan)
    for (layer, expert), value in cells.items():
        if layer >= n_layers or expert >= n_experts:
            raise FormatError(f"layer {layer} expert {expert} is outside {n_layers} x {n_experts}")
        matrix[layer, expert] = value
    missing = np.argwhere(np.isnan(matrix))
    if missing.size:
        raise FormatError(f"{len(missing)} (layer, expert) cells missing, first {missing[0].tolist()}")
    return matrix


def parse_expert_counters(text: str, *, metric: str = SIM_EXPERT_COUNTER, model_name: str | None = None) -> FloatArray:
    """The weight matrix from a Prometheus text exposition of per-(layer, expert) token counters."""
    samples = [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == metric and (model_name is None or sample.labels.get("model_name") == model_name)
    ]
    return load_matrix(samples)


def counter_increase(before: FloatArray, after: FloatArray) -> FloatArray:
    """Per-cell increase of cumulative counters between two scrapes; a cell that went down restarted
    (engine restart), so its increase is its new value, as in PromQL's increase()."""
    if before.shape != after.shape:
        raise FormatError(f"scrapes differ in shape: {before.shape} vs {after.shape}")
    grown: FloatArray = np.where(after >= before, after - before, after)
    return grown
