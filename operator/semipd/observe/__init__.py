"""Observations of a pool's engines from Prometheus, typed, with unknown kept distinct from zero."""
