"""``python -m autarch.services.tools``: run one tools process."""

from autarch.runtime.startup import require_extra

if __name__ == "__main__":
    require_extra("tools")  # before the service's own imports: a missing dependency is named with its extra
    from autarch.runtime.process import run_service

    from .service import start

    run_service("tools", start)
