"""Whether a port ``autarch up`` is about to serve on is free, asked before anything is started.

A gateway or nats-server that finds its port taken exits, and a supervisor would restart it every few seconds
for ever; worse, a NATS port held by another nats-server greets our clients as if it were ours. So
``autarch up`` checks each port first and refuses to start, naming the port and the setting that chooses it.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["PortInUse", "ensure_free"]


class PortInUse(RuntimeError):
    """A port the system needs is held by another program."""

    def __init__(self, host: str, port: int, what: str, setting: str) -> None:
        self.host, self.port = host, port
        super().__init__(f"port {port} on {host} ({what}) is already in use by another program; stop it, or choose "
                         f"another port with {setting}.")


def ensure_free(host: str, port: int, *, what: str, setting: str) -> None:
    """Raise :class:`PortInUse` when something listens on ``host:port``.

    Bound as the servers bind (SO_REUSEADDR), so connections of a previous run still in TIME_WAIT do not count:
    only a live listener does.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(host, port, what, setting) from None
            raise OSError(exc.errno, f"cannot listen on {host}:{port} ({what}): {exc.strerror}") from None
