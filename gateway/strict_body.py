"""JSON bodies decoded as strictly as the document says, before Litestar's lenient conversion.

Litestar builds a handler's arguments with ``msgspec.convert(..., strict=False)``, which takes ``0`` for
``false``, ``"5"`` for ``5`` and ``"true"`` for ``true``. The OpenAPI document (and every other client of our
contracts) says those are wrong types, so a body is first decoded strictly against the handler's ``data`` type;
what that refuses is a 400 with the path of the culprit, and the handler never runs.

One thing JSON Schema allows that a strict decoder would not: a number with a zero fraction (``2.0``) is an
``integer`` to JSON Schema, so it is taken as one (``2.5`` is still refused); the document keeps its word.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.connection import ASGIConnection
from litestar.exceptions import ValidationException
from litestar.handlers import BaseRouteHandler, HTTPRouteHandler

__all__ = ["strict_body"]


async def strict_body(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """A guard: refuse a body that does not decode strictly as the handler's ``data`` parameter."""
    if not isinstance(handler, HTTPRouteHandler):
        return
    data = handler.parsed_fn_signature.parameters.get("data")
    if data is None:
        return
    body = await connection.body()  # type: ignore[attr-defined]  # an HTTP connection is a Request
    if not body.strip() and data.has_default:
        return  # an optional body left out: the handler's default applies
    try:
        try:
            msgspec.json.decode(body, type=data.annotation, strict=True)
        except msgspec.ValidationError:
            # Checked again with whole floats as integers (rare: only a body the strict decoder refused).
            msgspec.convert(_whole_floats_as_ints(msgspec.json.decode(body)), data.annotation, strict=True)
    except msgspec.ValidationError as exc:
        raise ValidationException(f"the body does not match the schema: {exc}",
                                  extra=[{"message": str(exc), "key": _where(str(exc))}]) from None
    except msgspec.DecodeError:
        return  # not JSON (or not UTF-8): Litestar's own decoding answers that, as before


def _whole_floats_as_ints(value: Any) -> Any:
    """``value`` (decoded JSON) with each float that has no fraction as an int: JSON Schema's ``integer``."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, list):
        return [_whole_floats_as_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole_floats_as_ints(v) for k, v in value.items()}
    return value


def _where(message: str) -> str:
    # msgspec ends its messages with "- at `$.field`" when it knows where.
    _, at, path = message.rpartition(" - at `")
    return path.rstrip("`") if at else "body"
