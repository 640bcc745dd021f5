"""``python -m autarch.services.notifier``: run the notifier until SIGINT/SIGTERM."""

from __future__ import annotations

from autarch.runtime.startup import require_extra


def main() -> None:
    require_extra("notifier")  # before the service's own imports: a missing dependency is named with its extra
    from autarch.runtime.process import run_service
    from autarch.runtime.standby import exclusive

    from .service import start

    run_service("notifier", exclusive("notifier", start))


if __name__ == "__main__":
    main()
