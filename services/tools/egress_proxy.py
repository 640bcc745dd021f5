"""The registry proxy: one preflight command's only way out of its network namespace.

For each preflight call the tools service opens an :class:`EgressGate`: an HTTP proxy listening on a unix socket
in a directory of its own (``autarch-egress-*``, mode 0700), which the call's sandbox binds in and the forwarder
inside the namespace (:mod:`.egress_forward`) relays ``127.0.0.1:<port>`` to. It serves

- ``CONNECT host:port`` (https: a byte tunnel; TLS stays end to end, nothing is inspected), and
- ``GET``/``HEAD`` of an absolute ``http://`` URI (a plain-http index), sent on with ``Connection: close``,

to the hosts of the :class:`~.egress_allow.AllowList` only, resolving names itself (the command has no DNS).
Anything else is answered ``403`` with a plain reason, logged, and recorded on the gate, so the call's result can
say what was refused and which setting opens it. A gate lives as long as its call: closing it stops the listener,
cuts every tunnel and removes the directory, so a socket never outlives the command it served, and a command that
is not preflight (a pulse) has no socket to reach.

The bytes relayed are the command's; they are never parsed past the request head, and the head is bounded
(:data:`HEAD_LIMIT`), as are the connections one call may hold open (``max_connections``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .egress_allow import AllowList, refused_address

__all__ = ["HEAD_LIMIT", "EgressGate", "Refusal", "Resolver", "system_resolver"]

log = logging.getLogger("tools.egress")

HEAD_LIMIT = 64 * 1024
"""Bytes a request head may take (request line and headers)."""
_HEAD_SECONDS = 30.0
_CONNECT_SECONDS = 15.0
_CHUNK = 256 * 1024
_SOCKET_PARENT = "/tmp" if os.access("/tmp", os.W_OK | os.X_OK) else None
_HOP_HEADERS = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization",
                          b"proxy-authenticate", b"te", b"trailer", b"upgrade"})

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``(host, port)`` → the addresses to try, in order (raises :class:`OSError` when the name does not resolve)."""


async def system_resolver(host: str, port: int) -> list[str]:
    """The system's resolver (``getaddrinfo``), for TCP."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Refusal:
    """A connection the gate did not make: refused by the allow-list, or the host could not be reached."""

    host: str
    port: int
    reason: str
    refused: bool
    """True: the allow-list (or the address rule) said no; False: allowed, but resolving or connecting failed."""


class _Denied(Exception):
    def __init__(self, status: int, reason: str, *, refused: bool = True) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.refused = refused


_STATUS_TEXT = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 431: "Request Header Fields Too Large",
                502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def _split_target(target: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` or ``[v6]:port`` → (host, port); ValueError when it is neither."""
    if target.startswith("["):
        host, _, rest = target[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = target.rpartition(":") if target.count(":") == 1 else (target, "", "")
    port = int(port_text) if port_text else default_port
    if not host or not 0 < port < 65536 or any(c.isspace() or c in "/@?#" for c in host):
        raise ValueError(target)
    return host, port


class EgressGate:
    """One call's proxy to the registries (see the module). Use as ``async with``."""

    def __init__(self, allow: AllowList, *, label: str, resolver: Resolver | None = None,
                 max_connections: int = 64) -> None:
        self.allow = allow
        self.label = label
        """Who is asking, for the log (``session … call …``)."""
        self.resolver = resolver or system_resolver
        self.max_connections = max_connections
        self.directory: str | None = None
        self.socket_path: str | None = None
        self.refusals: list[Refusal] = []
        """Each (host, port) once, in the order they were first refused or failed."""
        self.reached: dict[str, int] = {}
        """``host:port`` → connections made to it."""
        self._server: asyncio.base_events.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> EgressGate:
        # In /tmp whatever TMPDIR says: every sandbox hides /tmp (Landlock does not govern connecting to a unix
        # socket by path), so only the sandbox that binds this directory back can reach the socket. One mkdir
        # here and one small rmtree in close(): cheaper than the two thread hops they would cost.
        self.directory = tempfile.mkdtemp(prefix="autarch-egress-", dir=_SOCKET_PARENT)
        self.socket_path = os.path.join(self.directory, "proxy.sock")
        self._server = await asyncio.start_unix_server(self._accept, path=self.socket_path, limit=HEAD_LIMIT)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening, cut every connection, remove the socket's directory."""
        if self._server is not None:
            self._server.close()
            self._server = None
            if self.reached:
                log.info("sandbox registry proxy for %s reached %s", self.label,
                         ", ".join(f"{target} ({count})" for target, count in self.reached.items()))
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    # -- one connection -----------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            if len(self._handlers) > self.max_connections:
                raise _Denied(503, f"this command already holds {self.max_connections} connections through the "
                                   "sandbox's registry proxy", refused=False)
            await self._serve(reader, writer)
        except _Denied as denied:
            await self._answer(writer, denied.status, denied.reason)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, OSError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_SECONDS)
        except asyncio.LimitOverrunError:
            raise _Denied(431, f"the request head is longer than {HEAD_LIMIT} bytes", refused=False) from None
        lines = head[:-4].split(b"\r\n")
        try:
            method, target, version = lines[0].decode("ascii").split(" ")
        except (UnicodeDecodeError, ValueError):
            raise _Denied(400, "not an HTTP proxy request", refused=False) from None
        if method == "CONNECT":
            host, port = self._target(target, 443)
            upstream_reader, upstream_writer = await self._open(host, port)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await self._relay(reader, writer, upstream_reader, upstream_writer, until_either=False)
            return
        if not target.lower().startswith("http://"):
            raise _Denied(400, "this proxy takes CONNECT host:port (https) or an absolute http:// URI", refused=False)
        if method not in ("GET", "HEAD"):
            raise _Denied(405, f"{method} is not forwarded: preflight fetches packages (GET, HEAD) over plain http")
        authority, slash, rest = target[len("http://"):].partition("/")
        host_header = authority.rpartition("@")[2]
        host, port = self._target(host_header, 80)
        upstream_reader, upstream_writer = await self._open(host, port)
        # Host is the URI's, never the client's own: on a shared CDN another Host would reach another site.
        request = [f"{method} {slash or '/'}{rest} {version}".encode(), f"Host: {host_header}".encode()]
        for line in lines[1:]:
            name = line.partition(b":")[0].strip().lower()
            if name not in _HOP_HEADERS and name != b"host":
                request.append(line)
        request.append(b"Connection: close")
        upstream_writer.write(b"\r\n".join(request) + b"\r\n\r\n")
        await self._relay(reader, writer, upstream_reader, upstream_writer, until_either=True)

    def _target(self, target: str, default_port: int) -> tuple[str, int]:
        try:
            host, port = _split_target(target, default_port)
        except ValueError:
            raise _Denied(400, f"not a host and port: {target[:200]!r}", refused=False) from None
        if not self.allow.permits(host, port):
            self._record(host, port, "not in the allow-list", refused=True)
            raise _Denied(403, f"the sandbox refused {host}:{port}: preflight may reach only the package "
                               "registries in sandbox_registry_hosts and the pip/npm mirrors configured on this "
                               "machine")
        return host, port

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        fixed = self.allow.fixed_address(host)
        try:
            addresses = [fixed] if fixed else await asyncio.wait_for(self.resolver(host, port), _CONNECT_SECONDS)
        except (OSError, TimeoutError) as exc:
            reason = f"could not resolve {host}: {getattr(exc, 'strerror', None) or exc or 'timed out'}"
            self._record(host, port, reason, refused=False)
            raise _Denied(502, reason, refused=False) from None
        if not self.allow.may_be_local(host):
            local = [a for a in addresses if refused_address(a)]
            addresses = [a for a in addresses if a not in local]
            if not addresses:
                reason = f"{host} resolves to a local address ({', '.join(local)})"
                self._record(host, port, reason, refused=True)
                raise _Denied(403, f"the sandbox refused {host}:{port}: {reason}, which only a name given in "
                                   "sandbox_registry_resolve (or localhost) may reach")
        error: BaseException | None = None
        # IPv4 first: where IPv6 traffic is silently dropped, each v6 address would cost a connect timeout.
        for address in sorted(addresses, key=lambda a: ":" in a):
            try:
                opened = await asyncio.wait_for(asyncio.open_connection(address, port, limit=_CHUNK),
                                                _CONNECT_SECONDS)
            except (OSError, TimeoutError) as exc:
                error = exc
                continue
            target = f"{host}:{port}"
            self.reached[target] = self.reached.get(target, 0) + 1
            return opened
        reason = f"could not connect to {host}:{port}: {getattr(error, 'strerror', None) or error or 'timed out'}"
        self._record(host, port, reason, refused=False)
        raise _Denied(502, reason, refused=False)

    def _record(self, host: str, port: int, reason: str, *, refused: bool) -> None:
        if any(r.host == host and r.port == port for r in self.refusals):
            return
        self.refusals.append(Refusal(host, port, reason, refused))
        if refused:
            log.warning("sandbox registry proxy refused %s:%d for %s: %s", host, port, self.label, reason)
        else:
            log.info("sandbox registry proxy: %s (for %s)", reason, self.label)

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
        body = (reason + "\n").encode()
        head = (f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8"
                f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(head.encode() + body)
            await writer.drain()

    @staticmethod
    async def _relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                     upstream_reader: asyncio.StreamReader, upstream_writer: asyncio.StreamWriter, *,
                     until_either: bool) -> None:
        """Copy both ways until both sides are done (a tunnel) or the upstream is (one plain-http exchange)."""

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await source.read(_CHUNK):
                    sink.write(data)
                    await sink.drain()
                if sink.can_write_eof():
                    sink.write_eof()

        upward = asyncio.ensure_future(pipe(client_reader, upstream_writer))
        downward = asyncio.ensure_future(pipe(upstream_reader, client_writer))
        try:
            if until_either:
                await downward
            else:
                await asyncio.gather(upward, downward)
        finally:
            upward.cancel()
            downward.cancel()
            await asyncio.gather(upward, downward, return_exceptions=True)
            upstream_writer.close()
