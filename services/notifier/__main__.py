"""``python -m autarch.services.notifier``: run the notifier until SIGINT/SIGTERM."""

from __future__ import annotations

from autarch.runtime.process import run_service
from autarch.runtime.standby import exclusive

from .service import start


def main() -> None:
    run_service("notifier", exclusive("notifier", start))


if __name__ == "__main__":
    main()
