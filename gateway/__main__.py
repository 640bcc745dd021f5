"""``python -m autarch.gateway``: serve the HTTP API with uvicorn.

The gateway binds its port itself before serving: a port another program holds is said once and ends the
process with ``CANNOT_START`` (``autarch up`` then stops instead of restarting it every few seconds).
"""

from __future__ import annotations

from autarch.runtime.startup import listen, require_extra


def main() -> None:
    require_extra("gateway")  # before litestar and uvicorn are imported: a missing one is named with its extra
    import uvicorn

    from autarch.runtime.process import configure_logging, settle_heap
    from autarch.runtime.settings import GatewaySettings, load_settings, narrow

    from .app import create_app
    from .sse import server_send_kept

    settings = narrow(load_settings(), GatewaySettings)
    configure_logging(settings.log_level)
    sock = listen("gateway", settings.host, settings.port, setting="--port or AUTARCH_PORT")
    app = create_app(settings)
    settle_heap()  # the app and its routes live as long as the process: out of the collector's way
    config = uvicorn.Config(server_send_kept(app), host=settings.host, port=settings.port, log_level="warning",
                            access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
