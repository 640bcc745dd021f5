"""``python -m autarch.gateway``: serve the HTTP API with uvicorn."""

from __future__ import annotations

import os

import uvicorn

from autarch.runtime.process import configure_logging
from autarch.runtime.settings import load_settings

from .app import create_app


def main() -> None:
    settings = load_settings()
    configure_logging(settings.log_level)
    expected = tuple(s for s in os.environ.get("AUTARCH_EXPECTED_SERVICES", "orchestrator").split(",") if s)
    app = create_app(settings, expected_services=expected)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
