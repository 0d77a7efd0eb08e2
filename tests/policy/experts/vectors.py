"""The reference's published EPLB test vectors (restated in docs/placement.md), as fixtures."""

from __future__ import annotations

README_WEIGHT = [
    [90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
    [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27],
]
README_HIERARCHICAL = (16, 4, 2, 8)
"""num_replicas, num_groups, num_nodes, num_gpus: 4 groups % 2 nodes == 0, so hierarchical."""
README_GLOBAL = (16, 3, 2, 8)
"""3 groups % 2 nodes != 0, so the global policy on the same input."""
README_PHY2LOG = [
    [5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
    [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1],
]
README_LAYER0_LOADS = [121.5, 86.5, 125, 113, 147.5, 131.5, 156, 152]
README_MAX_OVER_MEAN = (1.208, 1.242)
README_GLOBAL_MAX_OVER_MEAN = (1.073, 1.190)
README_TRIVIAL_MAP = [[*range(12), 0, 1, 2, 3]] * 2
README_TRIVIAL_MAX_OVER_MEAN = (2.083, 2.381)

FLASHLB_WEIGHT = [[600, 560, 120, 120, 20, 10, 10, 10]]
FLASHLB_TOPOLOGY = (16, 1, 1, 8)
FLASHLB_LOGCNT = [[5, 5, 1, 1, 1, 1, 1, 1]]
FLASHLB_LOADS = [232, 232, 232, 140, 130, 130, 130, 224]
FLASHLB_PHY2LOG = [[0, 1, 2, 1, 3, 1, 0, 4, 0, 5, 0, 6, 0, 7, 1, 1]]
FLASHLB_MAX_OVER_MEAN = 1.28
FLASHLB_NO_REDUNDANCY_MAX_OVER_MEAN = 3.31
FLASHLB_REPORTED_MAX = 205
"""FlashLB's own result on the example (vllm-ascend PR #3042)."""

ALL = {
    "readme-hierarchical": (README_WEIGHT, README_HIERARCHICAL),
    "readme-global": (README_WEIGHT, README_GLOBAL),
    "flashlb": (FLASHLB_WEIGHT, FLASHLB_TOPOLOGY),
    "flashlb-no-redundancy": (FLASHLB_WEIGHT, (8, 1, 1, 8)),
}
