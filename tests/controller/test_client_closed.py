"""A call cut off by the operator's own shutdown is told apart from a real failure."""

from __future__ import annotations

from semipd.controller.apiclient import client_closed


def test_a_closed_session_is_shutdown_and_anything_else_is_a_failure() -> None:
    assert client_closed(RuntimeError("Session is closed"))
    assert not client_closed(RuntimeError("something else"))
    assert not client_closed(ValueError("Session is closed"))
