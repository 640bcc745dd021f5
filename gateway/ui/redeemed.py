"""Login links used once across every gateway: their nonces, claimed in a JetStream key-value bucket.

Each gateway also remembers the links it redeemed (``signin.LoginLinks``), but with several gateways on one
system (``autarch up --cluster``) that memory alone would let a link work once on each of them. So a link is
only redeemed after its nonce was *created* in the bucket ``AUTARCH_UI_LOGINS``: creating a key that exists
fails on the server, whichever gateway tries, so exactly one claim wins. Keys expire with the bucket's
``max_age`` (a little more than a link's life): by then the link's own expiry refuses it.
"""

from __future__ import annotations

import re

from nats.aio.client import Client
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from autarch.runtime.bus import open_key_value

from .signin import LOGIN_TTL

__all__ = ["BUCKET", "SharedRedemptions"]

BUCKET = "AUTARCH_UI_LOGINS"
_NONCE = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")  # what secrets.token_urlsafe gives, and a valid key


class SharedRedemptions:
    """The claim on each login link's nonce, shared by the gateways of one NATS system."""

    def __init__(self, nc: Client, *, replicas: int = 1, timeout: float = 5.0) -> None:
        self._nc = nc
        self._replicas = replicas
        self._timeout = timeout
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await open_key_value(self._nc, BUCKET, replicas=self._replicas, timeout=self._timeout,
                                            ttl=LOGIN_TTL + 60,
                                            description="Nonces of the UI login links already redeemed")
        return self._kv

    async def claim(self, nonce: str) -> bool:
        """True for the first claim of ``nonce`` on this system, False for every later one.

        Raises:
            Exception: NATS or JetStream did not answer (the caller refuses the sign-in: a link is never
                redeemed without its claim).
        """
        if not _NONCE.match(nonce):
            return False
        kv = await self._bucket()
        try:
            await kv.create(nonce, b"")
        except KeyWrongLastSequenceError:
            return False
        return True
