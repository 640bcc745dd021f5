"""A real HTTP receiver for the notifier's tests: a tiny asyncio HTTP/1.1 server that records every POST (a JSON
body decoded, form fields as a dict).

It can start late (on a port picked before), answer with a chosen status, or hold its answers until the test
lets them go, so a test waits on what it received, never on a sleep.
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

__all__ = ["Received", "Receiver", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Receiver:
    port: int = field(default_factory=free_port)
    status: int = 200
    hold: asyncio.Event | None = None
    """When set, every answer waits for it (a slow or dead endpoint)."""
    received: list[Received] = field(default_factory=list)
    _server: asyncio.base_events.Server | None = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self.hold is not None:
            self.hold.set()

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    async def wait_for(self, count: int, path: str | None = None, timeout: float = 30.0) -> list[Received]:
        """Wait until ``count`` requests (at ``path``) came; returns them."""
        def got() -> list[Received]:
            return self.received if path is None else self.at(path)

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(got()) >= count), timeout)
        return got()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                _method, path, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = h.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if self.hold is not None:
                    await self.hold.wait()
                status = self.status
                if status < 400:
                    async with self._changed:
                        self.received.append(Received(path, headers, _decode(headers, body)))
                        self._changed.notify_all()
                payload = b'{"ok":true}'
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()


def _decode(headers: dict[str, str], body: bytes) -> Any:
    if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        fields = parse_qs(body.decode(), keep_blank_values=True, strict_parsing=True)
        assert all(len(values) == 1 for values in fields.values()), fields
        return {name: values[0] for name, values in fields.items()}
    return json.loads(body or b"null")
