"""``python -m autarch.services.indexer``: run one indexer process."""

from autarch.runtime.startup import require_extra

if __name__ == "__main__":
    require_extra("indexer")  # before the service's own imports: a missing dependency is named with its extra
    from autarch.runtime.process import run_service
    from autarch.runtime.standby import exclusive

    from .service import start

    run_service("indexer", exclusive("indexer", start))
