"""Who is asking: a principal resolved from a Bearer key (the REST contract, "Principals and keys")."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass, replace
from datetime import datetime

from app.kit.tenancy.view import MAIN, View

KEY_PREFIX = "msk_"


@dataclass(frozen=True)
class Principal:
    org_id: uuid.UUID
    user_id: uuid.UUID
    name: str
    roles: tuple[str, ...]
    groups: tuple[str, ...]
    clearances: tuple[str, ...]
    # Which state of the org's memory this principal reads and writes (main now, unless a request
    # names a branch with Memscale-Branch or asks `as_of`): app/kit/tenancy/view.py.
    view: View = MAIN

    def has_role(self, *roles: str) -> bool:
        return any(r in self.roles for r in roles)

    def at(self, as_of: datetime | None) -> Principal:
        """The same principal reading the state as recorded at `as_of` (None: unchanged)."""
        return self if as_of is None else replace(self, view=self.view.at(as_of))

    def in_view(self, view: View) -> Principal:
        return replace(self, view=view)


def new_key() -> tuple[uuid.UUID, str, bytes, bytes]:
    """Return (key id, the key to show once, salt, HMAC-SHA256(salt, secret))."""
    key_id = uuid.uuid4()
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    return key_id, f"{KEY_PREFIX}{key_id.hex}_{secret}", salt, hash_secret(salt, secret)


def hash_secret(salt: bytes, secret: str) -> bytes:
    # Keys carry 256 random bits, so a salted HMAC is as strong as a slow hash and costs ~1 µs.
    return hmac.new(salt, secret.encode(), hashlib.sha256).digest()


def parse_key(key: str) -> tuple[uuid.UUID, str] | None:
    if not key.startswith(KEY_PREFIX):
        return None
    body = key[len(KEY_PREFIX) :]
    key_hex, sep, secret = body.partition("_")
    if not sep or not secret or len(key_hex) != 32:
        return None
    try:
        return uuid.UUID(hex=key_hex), secret
    except ValueError:
        return None
