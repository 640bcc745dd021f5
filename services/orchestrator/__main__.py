"""``python -m autarch.services.orchestrator``: run one orchestrator process."""

from autarch.runtime.startup import require_extra

if __name__ == "__main__":
    require_extra("orchestrator")  # before the service's own imports: a missing dependency is named with its extra
    from autarch.runtime.process import run_service
    from autarch.runtime.standby import partitioned

    from .service import start

    run_service("orchestrator", partitioned("orchestrator", start))
