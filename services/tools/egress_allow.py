"""Which hosts a preflight command may reach through the registry proxy (:mod:`.egress_proxy`), and at which address.

An entry is ``name`` (ports 80 and 443), ``name:port`` (that port only), ``*.name`` (any subdomain of ``name``, on
80 and 443) or an IP literal (``[::1]:3141`` for IPv6 with a port). Names compare case-insensitively, without a
trailing dot. The proxy resolves names itself — a confined command has no DNS — with ``resolve`` pairs (the
``sandbox_registry_resolve`` setting) taking the place of DNS for the names they give.

A name reaches a loopback, link-local, unspecified or multicast address only when the user chose that address:
``localhost``, a loopback literal, or a name ``resolve`` maps. Otherwise an allowed name whose DNS answer points
at this machine (or at a cloud's metadata service) would open the gateway, NATS or PostgreSQL to the command.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["DEFAULT_PORTS", "AllowList", "parse_host", "refused_address"]

DEFAULT_PORTS = (80, 443)
"""The ports an entry without one allows: plain HTTP and HTTPS."""
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def _normal(name: str) -> str:
    return name.strip().rstrip(".").lower()


def parse_host(entry: str) -> tuple[str, int | None]:
    """``(host, port)`` of an allow-list entry (port None: :data:`DEFAULT_PORTS`).

    Raises:
        ValueError: not a host name, IP literal or ``*.`` pattern, or a port outside 1 to 65535.
    """
    text = entry.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
        ipaddress.IPv6Address(host)
    elif text.count(":") > 1:  # a bare IPv6 literal
        host, port_text = text, ""
        ipaddress.IPv6Address(host)
    else:
        host, _, port_text = text.partition(":")
    host = _normal(host)
    bare = host.removeprefix("*.")
    if not bare or any(not part or not all(c.isalnum() or c in "-_:" for c in part) for part in bare.split(".")):
        raise ValueError(f"not a host name: {entry!r}")
    if not port_text:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"not a port: {entry!r}")
    return host, int(port_text)


def _is_local_literal(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refused_address(address: str) -> bool:
    """Whether ``address`` is this machine or its link (loopback, link-local, unspecified, multicast)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast


@dataclass(frozen=True)
class AllowList:
    """The hosts and ports preflight may reach, and the addresses the user fixed for some names."""

    entries: tuple[tuple[str, int | None], ...] = ()
    resolve: tuple[tuple[str, str], ...] = ()
    """``(name, address)`` pairs used instead of DNS."""
    _fixed: dict[str, str] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_fixed", dict(self.resolve))

    @classmethod
    def build(cls, hosts: Iterable[str], resolve: Iterable[str] = ()) -> AllowList:
        """From the settings' strings (``sandbox_registry_hosts`` plus mirrors; ``sandbox_registry_resolve``).

        Raises:
            ValueError: an entry or pair that is not one (the message quotes it).
        """
        entries = list(dict.fromkeys(parse_host(host) for host in hosts))
        pairs = []
        for pair in resolve:
            name, sep, address = pair.partition("=")
            if not sep:
                raise ValueError(f"not a name=address pair: {pair!r}")
            pairs.append((_normal(name), str(ipaddress.ip_address(address.strip()))))
        return cls(tuple(entries), tuple(pairs))

    def permits(self, host: str, port: int) -> bool:
        """Whether an entry names ``host`` (itself, or under a ``*.`` pattern) with ``port``."""
        name = _normal(host)
        for entry, entry_port in self.entries:
            if port not in (DEFAULT_PORTS if entry_port is None else (entry_port,)):
                continue
            if entry == name or (entry.startswith("*.") and name.endswith(entry[1:])):
                return True
        return False

    def fixed_address(self, host: str) -> str | None:
        """The address ``sandbox_registry_resolve`` gives ``host``; None: ask DNS."""
        return self._fixed.get(_normal(host))

    def may_be_local(self, host: str) -> bool:
        """Whether ``host`` may lead to a loopback or link-local address (the user chose it: see the module)."""
        name = _normal(host)
        return name in _LOCAL_NAMES or _is_local_literal(name) or name in self._fixed
