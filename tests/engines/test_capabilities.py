from __future__ import annotations

from semipd.api.v1alpha1 import EngineKind
from semipd.engines import capabilities_of
from tests.api.cluster_facts import EXPECTED_CAPS


def test_every_kind_has_capabilities_matching_the_documented_table() -> None:
    for kind in EngineKind:
        caps = capabilities_of(kind)
        assert caps.supports_split == EXPECTED_CAPS[kind].supports_split, kind
        assert caps.accelerators == EXPECTED_CAPS[kind].accelerators, kind
