"""Simulation: the latency model, trace readers, and (in sim.engine) the simulated semi-PD engine.

The same latency model times the simulated engine's steps and the fleet simulator's events.
"""
