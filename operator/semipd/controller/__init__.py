"""The operator's imperative shell: Kopf wiring, settings, and the reconcile entry point."""
