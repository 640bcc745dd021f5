"""web_code_search against a local stand-in of Exa's ``/context`` endpoint (real HTTP, real httpx)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from autarch.runtime.settings import Settings
from autarch.services.tools.service import build_executor

from .helpers import Tools

KEY = "exa-test-key-0123456789"


class ExaStandIn(BaseHTTPRequestHandler):
    requests: list[dict] = []
    status = 200

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "key": self.headers.get("x-api-key"), "body": body})
        if type(self).status != 200:
            payload = json.dumps({"error": f"bad key {self.headers.get('x-api-key')}"}).encode()
            self.send_response(type(self).status)
        else:
            payload = json.dumps(
                {"requestId": "r", "response": f"## Results for {body['query']}\nuse fetch()"}
            ).encode()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def exa():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ExaStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ExaStandIn.requests = []
    ExaStandIn.status = 200
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def web_tools(exa, tmp_path, worktree):
    executor = build_executor(
        Settings(data_dir=str(tmp_path / "data"), exa_api_key=KEY, exa_base_url=exa), grep_workers=0
    )
    yield Tools(executor, worktree)
    executor.close()


async def test_returns_exa_context_as_text(web_tools):
    result = await web_tools.result("web_code_search", {"query": "jwt validation in fastapi"})
    assert not result.is_json and not result.is_error
    assert result.content == "## Results for jwt validation in fastapi\nuse fetch()"
    (sent,) = ExaStandIn.requests
    assert sent == {
        "path": "/context",
        "key": KEY,
        "body": {"query": "jwt validation in fastapi", "tokensNum": "dynamic"},
    }


async def test_http_errors_take_the_seed_shape_without_echoing_the_key(web_tools):
    ExaStandIn.status = 401
    value = await web_tools("web_code_search", {"query": "x"})
    assert value["error"].startswith("There was an error searching the web for code: HTTP 401")
    assert KEY not in value["error"]


async def test_unreachable_exa_is_the_seed_error(tmp_path, worktree):
    executor = build_executor(
        Settings(data_dir=str(tmp_path / "d"), exa_api_key=KEY, exa_base_url="http://127.0.0.1:9"), grep_workers=0
    )
    try:
        value = await Tools(executor, worktree)("web_code_search", {"query": "x"})
    finally:
        executor.close()
    assert value["error"].startswith("There was an error searching the web for code: ")


async def test_without_a_key_the_seed_error(tools):
    assert await tools("web_code_search", {"query": "x"}) == {
        "error": "There was an error searching the web for code: no Exa API key is configured (set AUTARCH_EXA_API_KEY)"
    }
