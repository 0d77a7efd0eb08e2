"""Bearer-token check for the admin API against a mounted token file (re-read when it changes)."""

from __future__ import annotations

import hmac
import os


class TokenError(RuntimeError):
    """The token file is missing, unreadable or empty: the agent refuses to serve unauthenticated."""


class TokenFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._token = b""

    def token(self) -> bytes:
        """The current token; re-read when the file's inode, size or mtime changed (secret rotation)."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise TokenError(f"cannot stat token file {self.path}: {e}") from e
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp != self._stamp:
            try:
                with open(self.path, "rb") as f:
                    token = f.read().strip()
            except OSError as e:
                raise TokenError(f"cannot read token file {self.path}: {e}") from e
            if not token:
                raise TokenError(f"token file {self.path} is empty")
            self._token, self._stamp = token, stamp
        return self._token


def bearer_matches(authorization: str | None, token: bytes) -> bool:
    """Constant-time comparison of an `Authorization: Bearer <token>` header with the token."""
    if not authorization or not token:
        return False
    scheme, _, presented = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode("utf-8", "replace"), token)
