"""Engine drivers: per `engine.kind`, what the engine can do and how its pods are built."""

from semipd.engines.capabilities import CAPABILITIES, EngineCapabilities, SwitchMode, capabilities_of

__all__ = ["CAPABILITIES", "EngineCapabilities", "SwitchMode", "capabilities_of"]
