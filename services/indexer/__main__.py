"""``python -m autarch.services.indexer``: run one indexer process."""

from autarch.runtime.process import run_service
from autarch.runtime.standby import exclusive

from .service import start

if __name__ == "__main__":
    run_service("indexer", exclusive("indexer", start))
