"""A fake of the outside services the notifier talks to, as a real HTTP server on a thread: the Telegram Bot API
(``getUpdates`` long polling served from the messages a test sends, ``sendMessage`` recorded) under
``/bot<token>/``, and a recorder of every other POST (Discord, a Twilio-compatible SMS API, webhooks).

The Telegram side keeps every update, as if no offset had ever been confirmed: a client that forgets its
offset sees its old messages again, which is what a notifier killed before Telegram learned its offset would
see. Waiting helpers block on a condition, never sleep.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeApis", "Posted"]


@dataclass
class Posted:
    path: str
    headers: dict[str, str]
    body: Any


class FakeApis:
    def __init__(self, token: str) -> None:
        self.token = token
        self.updates: list[dict[str, Any]] = []
        self.offsets: list[int | None] = []
        """The ``offset`` of every ``getUpdates`` call, in order."""
        self.sent: list[dict[str, Any]] = []
        """Every ``sendMessage`` body."""
        self.pressed: list[dict[str, Any]] = []
        """Every ``answerCallbackQuery`` body (the bot's answer to a button press)."""
        self.posted: list[Posted] = []
        """Every other POST."""
        self.poll_failures = 0
        """The next this many ``getUpdates`` calls are answered 502."""
        self._ids = itertools.count(700_000_001)
        self._messages = itertools.count(1)
        self._changed = threading.Condition()
        self._stopped = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a long poll in flight does not hold up the test's end
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeApis:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # --- what a test does ------------------------------------------------------------------------------

    def say(self, chat_id: int, text: str, *, update: dict[str, Any] | None = None) -> int:
        """A message ``text`` in chat ``chat_id`` reaches the bot (or ``update`` as given); returns its update id."""
        with self._changed:
            update_id = next(self._ids)
            self.updates.append({"update_id": update_id, **(update if update is not None else {"message": {
                "message_id": next(self._messages), "date": 1_700_000_000, "text": text,
                "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
                "from": {"id": abs(chat_id), "is_bot": False, "first_name": "Ada"}}})})
            self._changed.notify_all()
        return update_id

    def press(self, chat_id: int, data: str) -> int:
        """Someone in chat ``chat_id`` presses an inline keyboard button whose ``callback_data`` is ``data``."""
        press = {"id": f"cb{next(self._ids)}", "chat_instance": "1", "data": data,
                 "from": {"id": abs(chat_id), "is_bot": False, "first_name": "Ada"},
                 "message": {"message_id": next(self._messages), "date": 1_700_000_000, "text": "…",
                             "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"}}}
        return self.say(chat_id, "", update={"callback_query": press})

    def wait_for(self, found: Any, what: str, timeout: float = 60.0) -> Any:
        """Wait until ``found()`` (called under the lock) returns something true; returns it."""
        with self._changed:
            result = self._changed.wait_for(found, timeout)
            if not result:
                raise AssertionError(f"timed out waiting for {what}: sent {self.sent}, posted {self.posted}")
            return result

    def wait_sent_bodies(self, count: int, chat_id: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until ``count`` messages were sent to ``chat_id``; returns their bodies."""
        def found() -> list[dict[str, Any]]:
            return [m for m in self.sent if str(m["chat_id"]) == str(chat_id)]

        with self._changed:
            if not self._changed.wait_for(lambda: len(found()) >= count, timeout):
                raise AssertionError(f"{len(found())} of {count} messages sent: {found()}")
            return found()

    def wait_sent(self, count: int, chat_id: int | None = None, timeout: float = 60.0) -> list[str]:
        """Wait until ``count`` messages were sent (to ``chat_id``); returns their texts."""
        def texts() -> list[str]:
            return [m["text"] for m in self.sent if chat_id is None or str(m["chat_id"]) == str(chat_id)]

        with self._changed:
            if not self._changed.wait_for(lambda: len(texts()) >= count, timeout):
                raise AssertionError(f"{len(texts())} of {count} messages sent: {texts()}")
            return texts()

    def wait_posted(self, count: int, path: str, timeout: float = 60.0) -> list[Posted]:
        with self._changed:
            def found() -> list[Posted]:
                return [p for p in self.posted if p.path == path]

            if not self._changed.wait_for(lambda: len(found()) >= count, timeout):
                raise AssertionError(f"{len(found())} of {count} posts to {path}: {self.posted}")
            return found()

    def wait_polled(self, offset: int | None, timeout: float = 30.0) -> None:
        """Wait for a ``getUpdates`` call asking from ``offset``."""
        with self._changed:
            if not self._changed.wait_for(lambda: offset in self.offsets, timeout):
                raise AssertionError(f"no getUpdates from offset {offset}: {self.offsets}")

    # --- the server ------------------------------------------------------------------------------------

    def get_updates(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        offset = body.get("offset")
        with self._changed:
            self.offsets.append(offset)
            self._changed.notify_all()
            if self.poll_failures > 0:
                self.poll_failures -= 1
                return 502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}

            def due() -> list[dict[str, Any]]:
                return [u for u in self.updates if offset is None or u["update_id"] >= offset]

            self._changed.wait_for(lambda: bool(due()) or self._stopped, float(body.get("timeout", 0)))
            return 200, {"ok": True, "result": due()}

    def send_message(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._changed:
            self.sent.append(body)
            self._changed.notify_all()
        return 200, {"ok": True, "result": {"message_id": next(self._messages), "chat": {"id": body["chat_id"]},
                                            "text": body["text"]}}

    def record(self, posted: Posted) -> None:
        with self._changed:
            self.posted.append(posted)
            self._changed.notify_all()


def _handler(fake: FakeApis) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
                body: Any = {k: v[0] for k, v in parse_qs(raw.decode(), keep_blank_values=True).items()}
            else:
                body = json.loads(raw or b"null")
            path = urlsplit(self.path).path
            answer: Any
            status, answer = 201, {}
            if path == f"/bot{fake.token}/getUpdates":
                status, answer = fake.get_updates(body or {})
            elif path == f"/bot{fake.token}/sendMessage":
                status, answer = fake.send_message(body)
            elif path == f"/bot{fake.token}/answerCallbackQuery":
                with fake._changed:
                    fake.pressed.append(body)
                    fake._changed.notify_all()
                status, answer = 200, {"ok": True, "result": True}
            elif path.startswith("/bot"):
                status, answer = 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            else:
                fake.record(Posted(self.path, headers, body))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler
