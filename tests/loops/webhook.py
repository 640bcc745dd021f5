"""A webhook receiver for loop notifications: records each POST by its ``Idempotency-Key``; can be down."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Webhook:
    """Serves ``http://127.0.0.1:<port>/<path>``; start it late to play a receiver that was down."""

    def __init__(self) -> None:
        self.port = free_port()
        self.received: list[tuple[str, str, dict[str, Any]]] = []
        """(path, Idempotency-Key, body) of every POST, resends included."""
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def start(self) -> Webhook:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with hook._lock:
                    hook.received.append((self.path.strip("/"), self.headers.get("Idempotency-Key", ""), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def texts(self, path: str) -> list[str]:
        """The notifications at ``path``, once per key, in the order they first came."""
        seen: dict[str, str] = {}
        with self._lock:
            for where, key, body in self.received:
                if where == path and key not in seen:
                    seen[key] = body["text"]
        return list(seen.values())

    def wait(self, path: str, count: int, timeout: float = 60) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.texts(path)
            if len(found) >= count:
                time.sleep(0.3)  # a quiet window: anything more (a doubled notification) would come now
                return self.texts(path)
            time.sleep(0.05)
        raise AssertionError(f"{path}: {self.texts(path)} after {timeout}s, expected {count} notifications")
