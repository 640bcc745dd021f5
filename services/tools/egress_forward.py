"""Inside a preflight command's network namespace: ``127.0.0.1:<port>`` relayed to the registry proxy's socket.

The namespace has only loopback, so the command's ``HTTPS_PROXY`` names this forwarder, which the namespace's init
(:mod:`.sandbox_launch`) starts before the command: it listens on loopback inside and carries each connection,
byte for byte, to the unix socket of the call's :class:`~.egress_proxy.EgressGate` outside, which decides what
the connection may reach. It reads nothing of what it relays.

Standard library only, imported without its package like :mod:`.landlock` (the launcher runs ``python -I -S``),
and only when a command gets the proxy: a pulse's launch never imports it. It uses the C modules ``_socket`` and
``_thread`` directly: ``socket`` imports ``enum`` and ``selectors``, which would add 30 to 80 ms to the start of
every preflight command. It runs as a child of the init, so it ends with the namespace when the command does.
"""

from __future__ import annotations

import _socket
import _thread
import os

__all__ = ["start"]

_CHUNK = 256 * 1024


def _pump(source: _socket.socket, sink: _socket.socket) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(_socket.SHUT_WR)
    except OSError:
        pass


def _carry(client: _socket.socket, path: str) -> None:
    """One connection: the other direction on a thread of its own, so neither can stall the other."""
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError as exc:
        body = f"the sandbox's registry proxy is gone ({exc.strerror})\n".encode()
        try:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(body), body))
        except OSError:
            pass
        client.close()
        upstream.close()
        return
    done = _thread.allocate_lock()
    done.acquire()

    def upward() -> None:
        try:
            _pump(client, upstream)
        finally:
            done.release()

    _thread.start_new_thread(upward, ())
    _pump(upstream, client)
    done.acquire()
    client.close()
    upstream.close()


def _serve(listener: _socket.socket, path: str) -> None:
    while True:
        try:
            fd, _ = listener._accept()
        except OSError:
            continue
        _thread.start_new_thread(_carry, (_socket.socket(fileno=fd), path))


def start(spec: dict) -> int:
    """Listen on ``127.0.0.1:spec["port"]`` (loopback must be up), then serve in a child; its pid.

    Listening happens here, before the command starts, so its first connection cannot come too early.
    """
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(spec["port"])))
    listener.listen(128)
    pid = os.fork()
    if pid == 0:
        try:
            _serve(listener, str(spec["socket"]))
        finally:
            os._exit(0)
    listener.close()
    return pid
