"""The expert placement in force for simulated MoE models (pure).

Routing shares come from semipd.perf.moe; counters are routed_tokens * q_e, computed at scrape time.

`ExpertPlacement` is the engine's expert map over its EP devices (SGLang's physical_to_logical_map
per MoE layer, with a version) and the per-device load it produces: each expert's tokens split
evenly over its replicas (semipd.policy.experts.metrics), summed per device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from semipd.policy.experts.layout import FloatArray, IntArray
from semipd.policy.experts.metrics import device_loads, max_over_mean, sglang_balancedness

# --------------------------------------------------------------------------- placement in force

LINK_BYTES_PER_S = 50e9
"""Assumed per-device bandwidth for moving expert weights during a rebalance (NVLink/HCCS order)."""


class PlacementError(ValueError):
    """A placement the engine cannot load (HTTP 400)."""


class StaleVersion(ValueError):
    """A placement older than the one in force, or the same version with another map (HTTP 409)."""


class ExpertPlacement:
    """The expert map in force on one engine and the device load it produces.

    Slots are `experts + redundant`, split evenly over `ep` devices (slot s lives on device
    s // (slots / ep)), like SGLang's `physical_to_logical_map`. Version 0 is SGLang's trivial map
    (slot s holds expert s % experts). Device tokens are counters: tokens routed under a map keep
    the shares of that map, so a switch changes the slope, never the value.
    """

    def __init__(self, hit_probabilities: Sequence[Sequence[float]], ep: int, redundant: int) -> None:
        self.hits = np.asarray(hit_probabilities, dtype=np.float64)
        layers, experts = self.hits.shape
        slots = experts + redundant
        if ep < 1 or redundant < 0 or slots % ep:
            raise PlacementError(f"{experts} experts + {redundant} redundant slots do not split over {ep} devices")
        self.layers, self.experts, self.slots, self.devices = layers, experts, slots, ep
        self.version = 0
        self.rebalances = 0
        self.phy2log = self.trivial_map()
        self._base: FloatArray = np.zeros((layers, ep))
        self._routed_at_switch = 0.0
        self.share = self._shares(self.phy2log)

    def trivial_map(self) -> IntArray:
        """SGLang's `--init-expert-location trivial`: slot s holds expert s % experts."""
        table: IntArray = np.tile(np.arange(self.slots, dtype=np.int64) % self.experts, (self.layers, 1))
        return table

    def _shares(self, phy2log: IntArray) -> FloatArray:
        return device_loads(self.hits, phy2log, self.devices)

    def device_tokens(self, routed_tokens: float) -> FloatArray:
        """[layers, devices] tokens processed by each device since start-up."""
        tokens: FloatArray = self._base + (routed_tokens - self._routed_at_switch) * self.share
        return tokens

    def balancedness(self) -> float:
        """SGLang's balancedness (mean over layers of mean/max device load) of the map in force."""
        return sglang_balancedness(self.share)

    def worst_max_over_mean(self) -> float:
        return float(max_over_mean(self.share).max())

    def check(self, version: Any, phy2log: Any) -> tuple[int, IntArray]:
        """The validated (version, map) of a request; raises PlacementError or StaleVersion."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise PlacementError("version must be an integer >= 1")
        if not isinstance(phy2log, list) or not all(isinstance(row, list) for row in phy2log):
            raise PlacementError("physical_to_logical_map must be a list of lists")
        if not all(isinstance(x, int) and not isinstance(x, bool) for row in phy2log for x in row):
            raise PlacementError("physical_to_logical_map must hold integers")
        if len(phy2log) != self.layers or any(len(row) != self.slots for row in phy2log):
            raise PlacementError(f"physical_to_logical_map must be {self.layers} MoE layers x {self.slots} slots")
        table = np.asarray(phy2log, dtype=np.int64)
        if table.min() < 0 or table.max() >= self.experts:
            raise PlacementError(f"expert ids must be in 0..{self.experts - 1}")
        counts = np.zeros((self.layers, self.experts), dtype=np.int64)
        np.add.at(counts, (np.arange(self.layers)[:, None], table), 1)
        if np.any(counts == 0):
            layer, expert = np.argwhere(counts == 0)[0].tolist()
            raise PlacementError(f"layer {layer}: logical expert {expert} has no physical slot")
        if version < self.version:
            raise StaleVersion(f"version {version} is older than the version {self.version} in force")
        if version == self.version and not np.array_equal(table, self.phy2log):
            raise StaleVersion(f"version {version} is in force with a different map")
        return version, table

    def moved_slots(self, table: IntArray) -> int:
        """Slots whose expert changes: the weights a switch has to copy."""
        return int((table != self.phy2log).sum())

    def apply(self, version: int, table: IntArray, routed_tokens: float) -> None:
        self._base = self.device_tokens(routed_tokens)
        self._routed_at_switch = routed_tokens
        if version != self.version:
            self.rebalances += 1
        self.version, self.phy2log, self.share = version, table, self._shares(table)

    def to_json(self, with_map: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "version": self.version,
            "layers": self.layers,
            "logicalExperts": self.experts,
            "physicalSlots": self.slots,
            "devices": self.devices,
            "balancedness": round(self.balancedness(), 6),
            "maxOverMean": round(self.worst_max_over_mean(), 6),
            "rebalances": self.rebalances,
        }
        if with_map:
            doc["physical_to_logical_map"] = self.phy2log.tolist()
        return doc
