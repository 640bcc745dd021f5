"""Base classes and codecs shared by every contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

__all__ = ["UUID_PATTERN", "Command", "Contract", "Query", "Reply", "decode_renamed", "decoder_for", "encode"]

UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$(?!\n)"
"""A canonical (lower-case, hyphenated) UUID; ``(?!\n)`` so Python's ``$`` refuses a final newline too."""

T = TypeVar("T")


class Contract(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """Base of every message. Unknown fields are ignored so older readers accept newer writers."""


class Command(Contract, kw_only=True):
    """A request that changes state."""


class Query(Contract, kw_only=True):
    """A request that only reads state."""


class Reply(Contract, kw_only=True):
    """A successful answer to a command or query."""


_encoder = msgspec.json.Encoder()
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def encode(message: Any) -> bytes:
    """Encode any contract (or builtin value) as JSON bytes."""
    return _encoder.encode(message)


def decoder_for(kind: type[T] | Any) -> msgspec.json.Decoder[T]:
    """Return the cached JSON decoder for ``kind``; decoders are built once and reused."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    return decoder


def decode_renamed(data: bytes, kind: type[T], renamed: Mapping[str, str]) -> T:
    """Decode ``data`` as ``kind``, reading a field stored under an old name (``renamed``: old name → new name).

    The one place old shapes are read: the current shape decodes at full speed; only a record the strict decode
    refuses is decoded again with every old name present (and its new name absent) moved to the new name. A record
    that still does not fit raises the second decode's ``ValidationError``.
    """
    decoder: msgspec.json.Decoder[T] = decoder_for(kind)
    try:
        return decoder.decode(data)
    except msgspec.ValidationError:
        raw = msgspec.json.decode(data)
        if not isinstance(raw, dict) or not any(old in raw and new not in raw for old, new in renamed.items()):
            raise
        for old, new in renamed.items():
            if old in raw and new not in raw:
                raw[new] = raw.pop(old)
        return decoder.decode(msgspec.json.encode(raw))
