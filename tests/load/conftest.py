"""Fixtures for the load-generator tests: fake streaming engines on 127.0.0.1 (see fake_openai)."""

from fake_openai import fake_engine, fake_engines

__all__ = ["fake_engine", "fake_engines"]
