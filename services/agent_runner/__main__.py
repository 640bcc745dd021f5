"""``python -m autarch.services.agent_runner``: run the agent runner process."""

from autarch.runtime.process import run_service
from autarch.runtime.standby import exclusive

from .service import start

if __name__ == "__main__":
    run_service("agent_runner", exclusive("agent_runner", start))
