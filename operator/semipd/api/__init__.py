"""The InferencePool API (`semipd.io/v1alpha1`): models, CRD generation and schema checks."""
