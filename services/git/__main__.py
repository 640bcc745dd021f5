"""``python -m autarch.services.git``: run the git service until SIGINT/SIGTERM."""

from __future__ import annotations

from autarch.runtime.process import run_service

from .service import start


def main() -> None:
    run_service("git", start)


if __name__ == "__main__":
    main()
