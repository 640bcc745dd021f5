"""dulwich's typed names for plain bytes, said once for the type checker.

Newer dulwich types an object id as ``ObjectID`` and a ref name as ``Ref`` (``NewType``s of ``bytes``); this
service handles both as the plain ``bytes`` every dulwich version takes. At run time these return their argument
unchanged (no import of a name an older dulwich lacks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

__all__ = ["oid", "ref_name"]


def oid(sha: bytes) -> ObjectID:
    """``sha`` (a hex object id) as dulwich's ``ObjectID``."""
    return cast("ObjectID", sha)


def ref_name(name: bytes) -> Ref:
    """``name`` (``refs/heads/…``) as dulwich's ``Ref``."""
    return cast("Ref", name)
