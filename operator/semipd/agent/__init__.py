"""The in-pod agent: wraps an engine command, supervises its processes and serves the split admin API.

It runs inside arbitrary engine images, so everything under this package uses the standard library
only (checked by tests that run the built zipapp with an isolated interpreter).
"""
