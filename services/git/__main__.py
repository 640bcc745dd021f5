"""``python -m autarch.services.git``: run the git service until SIGINT/SIGTERM."""

from __future__ import annotations

from autarch.runtime.startup import require_extra


def main() -> None:
    require_extra("git")  # before the service's own imports: a missing dependency is named with its extra
    from autarch.runtime.process import run_service

    from .service import start

    run_service("git", start)


if __name__ == "__main__":
    main()
