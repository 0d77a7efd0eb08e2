"""Discrete-event fleet simulator: semi-PD (and baseline) instances across node pools, a router,
simulated Prometheus, and controllers run in the loop (the shipped `semipd.policy.planner.plan()`
for ours; baselines under `baselines/`). Entry points: `simulate()` and `semipd simulate`.
"""
