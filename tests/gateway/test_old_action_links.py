"""An action link minted before issue 33 signed its run as ``w`` (``workflow_id``; a blocked loop's Stop link held its
loop session's id there); today's sign it as ``r`` (``run_id``). A link already sent keeps working: its signature
covers the fields as they were written, and the gateway reads ``w`` as the run."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from autarch.contracts.loops import AbortLoop
from autarch.runtime.action_links import KEY_FILE, verify

from .conftest import Gateway, new_id, stand_in_orchestrator
from .test_pulse_routes import loop_view


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def minted_before_issue_33(key: bytes, *, loop: str, iteration: int) -> str:
    """A blocked loop's Stop link exactly as the notifier minted it before issue 33."""
    fields = {"w": loop, "s": "blocked", "v": iteration, "a": "stop", "c": "telegram",
              "e": int(time.time() + 3600), "n": new_id()[:16]}
    body = _b64(json.dumps(fields, separators=(",", ":")).encode())
    return f"{body}.{_b64(hmac.new(key, b'action-link|' + body.encode(), hashlib.sha256).digest())}"


@pytest.fixture
async def aborts(nats_server) -> AsyncIterator[list[Any]]:
    received: list[Any] = []

    async def answer(command: AbortLoop) -> Any:
        received.append(command)
        return loop_view(command.session_id, status="aborted")

    async with stand_in_orchestrator(nats_server.url, [("abort_loop", AbortLoop)], answer, "old action link"):
        yield received


async def test_a_blocked_loops_stop_link_minted_before_run_id_still_stops_it_once(gateway: Gateway,
                                                                                  aborts: list[Any]) -> None:
    key = (Path(gateway.data_dir) / KEY_FILE).read_text().strip().encode()
    loop = new_id()
    token = minted_before_issue_33(key, loop=loop, iteration=2)
    link = verify(key, token)
    assert (link.run_id, link.stage, link.card_version, link.action) == (loop, "blocked", 2, "stop")
    async with gateway.client() as http:
        page = await http.get(f"/act/{token}", headers={"Accept": "text/html"})
        assert page.status_code == 200 and f"Loop session {loop}, blocked at iteration 2" in page.text
        done = await http.post(f"/act/{token}")
        assert done.status_code == 200, done.text
        assert (done.json()["action"], done.json()["run_id"], done.json()["loop"]["status"]) == (
            "stop", loop, "aborted")
        again = await http.post(f"/act/{token}")
        assert again.status_code == 410 and again.json()["code"] == "link_used"
    [abort] = aborts
    assert (abort.session_id, abort.blocked_at, abort.reason) == (loop, 2, "stopped from telegram")
