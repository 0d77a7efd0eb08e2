"""Baselines the product is compared against (reference: baselines.md), one module each.

Every baseline is a `Layout` (what instances the fleet runs) plus a `Controller` the simulator
calls every interval (semipd.sim.fleet.controller). Static layouts use `StaticController`.
"""
