"""Kopf settings the operator relies on: finite timeouts and paged initial lists."""

import kopf

from semipd.controller.handlers import WATCH_LIST_PAGE, configure_settings


def test_initial_lists_are_paged_and_network_calls_bounded() -> None:
    settings = kopf.OperatorSettings()
    assert settings.watching.chunk_size is None  # Kopf's default: one unpaged list
    configure_settings(settings)
    assert settings.watching.chunk_size == WATCH_LIST_PAGE
    assert 0 < WATCH_LIST_PAGE <= 1000
    assert settings.networking.request_timeout is not None
    assert settings.watching.server_timeout is not None
    assert settings.watching.client_timeout is not None
    assert settings.watching.client_timeout > settings.watching.server_timeout
