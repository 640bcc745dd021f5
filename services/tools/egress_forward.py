"""Inside a preflight command's network namespace: ``127.0.0.1:<port>`` relayed to the registry proxy's socket.

The namespace has only loopback, so the command's ``HTTPS_PROXY`` names this forwarder: it listens on loopback
inside and carries each connection, byte for byte, to the unix socket of the call's
:class:`~.egress_proxy.EgressGate` outside, which decides what the connection may reach. It reads nothing of what
it relays.

How it starts (:mod:`.sandbox_launch`): the command's own process, before it is confined, opens the listener and
hands it to the namespace's init (:func:`hand_over`), which forks the forwarder on it (:func:`fork_forwarder`).
The init waits for that hand-over or for the command's ``execve``, which closes their channel: a pulse's init
learns that way that it has nothing to start, and the command never waits for a fork.

Where it lives, and what it costs the command:

- it is a child of the namespace's init, in the command's PID, mount and network namespaces, so it ends with the
  namespace when the command does, like anything the command left behind; the command's shell never sees it
  among its children;
- like the init, it is not confined by Landlock and has none of the command's resource limits (``RLIMIT_*``);
  Landlock in turn keeps the confined command from ptracing it;
- it is in the command's cgroups, so what it uses counts against the command's limits, as it would if the
  command relayed its own connections: one process, plus two threads per open connection (one per direction),
  against ``sandbox_processes``; its memory (the pages of the forked init it writes to, 256 KiB per direction of
  a connection in flight) against ``sandbox_memory_mib``; its CPU time against ``sandbox_cpu_seconds``. It
  writes no file, so it counts nothing against ``sandbox_write_mib`` or ``sandbox_file_size_mib``.

Standard library only, imported without its package like :mod:`.landlock` (the launcher runs ``python -I -S``);
the launch server imports it once at its start. It uses the C modules ``_socket`` and ``_thread`` directly:
``socket`` imports ``enum`` and ``selectors``, which would add 30 to 80 ms to a launcher started on its own.
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys

__all__ = ["fork_forwarder", "hand_over"]

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
            fd, _ = listener._accept()  # type: ignore[attr-defined]  # the C socket has no accept() (test_private_names)
        except OSError:
            continue
        _thread.start_new_thread(_carry, (_socket.socket(fileno=fd), path))


def hand_over(spec: dict, init: _socket.socket) -> None:
    """In the command's process, before it is confined: listen on ``127.0.0.1:spec["port"]`` (loopback is up) and
    hand the listener and ``spec["socket"]`` to the namespace's init over ``init``, which forks the forwarder.

    Listening happens here, before the command starts, so its first connection cannot come too early (it waits
    in the backlog until the forwarder accepts it).
    """
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(spec["port"])))
        listener.listen(128)
        init.sendmsg([str(spec["socket"]).encode()],
                     [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, listener.fileno().to_bytes(4, sys.byteorder))])
    finally:
        listener.close()
    init.close()


def fork_forwarder(listener_fd: int, path: str) -> None:
    """In the init: fork the forwarder, serving ``listener_fd`` to the unix socket at ``path``.

    The forwarder holds nothing else: ``/dev/null`` in and out (the command's output pipes must close when the
    command's processes end), every other descriptor closed.
    """
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, listener_fd)
            os.closerange(listener_fd + 1, os.sysconf("SC_OPEN_MAX"))
            _serve(_socket.socket(fileno=listener_fd), path)
        finally:
            os._exit(0)
    os.close(listener_fd)
