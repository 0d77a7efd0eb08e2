"""Desired-state builders: pure functions from an InferencePool to every object it owns."""
