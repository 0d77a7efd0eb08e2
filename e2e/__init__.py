"""End-to-end tests and the local control-plane harness they run against (see docs/e2e-harness.md)."""
