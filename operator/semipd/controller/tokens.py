"""Agent admin tokens, derived rather than stored: HMAC(operator key, namespace/name/uid).

The operator never has to read a Secret back (least privilege) yet always knows each pool's token,
across restarts, as long as its key is stable. Rotating the key rotates every token and, through
the pod-template token digest, rolls the pods.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from pathlib import Path

log = logging.getLogger(__name__)


def load_key(path: str | None) -> bytes:
    """The operator's token key from a file; without one a random per-process key (with a warning)."""
    if path:
        key = Path(path).read_bytes().strip()
        if len(key) < 16:
            raise ValueError(f"{path}: the token key must be at least 16 bytes")
        return key
    log.warning("no SEMIPD_TOKEN_KEY_FILE: agent tokens change when the operator restarts (pods then roll)")
    return secrets.token_bytes(32)


def pool_token(key: bytes, namespace: str, name: str, uid: str) -> str:
    """The admin bearer token of one InferencePool's agents."""
    return hmac.new(key, f"{namespace}/{name}/{uid}".encode(), hashlib.sha256).hexdigest()
