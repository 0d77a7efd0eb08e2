"""Bearer token checks and token-file rotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from semipd.agent.auth import TokenError, TokenFile, bearer_matches


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer s3cret", True),
        ("bearer s3cret", True),
        ("Bearer  s3cret ", True),
        ("Bearer s3cret2", False),
        ("Bearer s3cre", False),
        ("Basic s3cret", False),
        ("s3cret", False),
        ("Bearer", False),
        ("", False),
        (None, False),
        ("Bearer sécret", False),
    ],
)
def test_bearer_matches(header: str | None, ok: bool) -> None:
    assert bearer_matches(header, b"s3cret") is ok


def test_empty_token_never_matches() -> None:
    assert not bearer_matches("Bearer ", b"")


def test_token_file_strips_and_rereads_on_change(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    tokens = TokenFile(str(path))
    assert tokens.token() == b"first"
    path.write_text("second-and-longer\n")
    assert tokens.token() == b"second-and-longer"


def test_missing_or_empty_token_file_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(TokenError):
        TokenFile(str(tmp_path / "absent")).token()
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(TokenError, match="empty"):
        TokenFile(str(tmp_path / "empty")).token()
