"""semipd-operator: a Kubernetes operator for elastic semi-PD LLM inference fleets.

The package is split by job: `api` (the InferencePool types and CRD generation), `controller`
(thin Kopf wiring around one idempotent reconcile), `observe`, `policy`, `engines`, `agent` and `sim`.
"""

__version__ = "0.1.0"
