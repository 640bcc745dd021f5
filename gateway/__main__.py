"""``python -m autarch.gateway``: serve the HTTP API with uvicorn."""

from __future__ import annotations

import uvicorn

from autarch.runtime.process import configure_logging
from autarch.runtime.settings import GatewaySettings, load_settings, narrow

from .app import create_app


def main() -> None:
    settings = narrow(load_settings(), GatewaySettings)
    configure_logging(settings.log_level)
    app = create_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
