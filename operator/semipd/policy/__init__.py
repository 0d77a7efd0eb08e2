"""Pure decisions: prefill/decode splits, replicas and pool choice (SLO autoscaler), and placement.

Nothing here talks to Kubernetes, Prometheus or a clock: `plan()` is a deterministic function of
(spec, observation, state), which is why the fleet simulator can run exactly what ships.
"""
