"""``python -m autarch.services.orchestrator``: run one orchestrator process."""

from autarch.runtime.process import run_service
from autarch.runtime.standby import partitioned

from .service import start

if __name__ == "__main__":
    run_service("orchestrator", partitioned("orchestrator", start))
