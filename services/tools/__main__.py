"""``python -m autarch.services.tools``: run one tools process."""

from autarch.runtime.process import run_service

from .service import start

if __name__ == "__main__":
    run_service("tools", start)
