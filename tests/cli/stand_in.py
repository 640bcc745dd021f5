"""What the CLI tests against a stand-in orchestrator share (``test_beads_cmd.py``, ``test_mail_cmd.py``): the real
gateway under uvicorn in the test's event loop, and the command run in a thread (it is synchronous, the gateway
answers in the loop). The stand-in orchestrator itself is ``tests.gateway.conftest.stand_in_orchestrator``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from autarch.cli.main import main
from autarch.runtime.settings import Settings
from tests.gateway.conftest import serve_gateway as serve_gateway_app


async def serve_gateway(nats_url: str, data: Path) -> AsyncIterator[list[str]]:
    """The gateway under uvicorn (``tests.gateway.conftest.serve_gateway``); yields the connection arguments every
    command gets."""
    settings = Settings(data_dir=str(data), nats_url=nats_url, request_timeout=2.0)
    async for gateway in serve_gateway_app(settings):
        yield ["--url", gateway.url, "--token-file", str(data / "token"), "--data-dir", str(data)]


class Cli:
    def __init__(self, connection: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        self.connection = connection
        self.capsys = capsys

    async def __call__(self, *argv: str, code: int = 0) -> str:
        """Run ``autarch …`` in a thread; assert its exit code; its stdout (stderr when it failed)."""
        self.capsys.readouterr()
        got = await asyncio.to_thread(main, [*argv, *self.connection])
        out, err = self.capsys.readouterr()
        assert got == code, f"autarch {' '.join(argv)} exited {got}\nstdout: {out}\nstderr: {err}"
        return out if code == 0 else err
