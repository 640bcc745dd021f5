"""``python -m autarch.gateway``: serve the HTTP API with uvicorn."""

from __future__ import annotations

from autarch.runtime.startup import require_extra


def main() -> None:
    require_extra("gateway")  # before litestar and uvicorn are imported: a missing one is named with its extra
    import uvicorn

    from autarch.runtime.process import configure_logging, settle_heap
    from autarch.runtime.settings import GatewaySettings, load_settings, narrow

    from .app import create_app

    settings = narrow(load_settings(), GatewaySettings)
    configure_logging(settings.log_level)
    app = create_app(settings)
    settle_heap()  # the app and its routes live as long as the process: out of the collector's way
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
