"""Fault injection for crash tests: kill the process right after a named step.

``AUTARCH_GIT_CRASH_AFTER=<step>`` makes the service SIGKILL itself the moment that step is
done, so a test can prove that every later step is finished (or redone) cleanly by a restarted
service. Steps, in order: ``branch``, ``worktree`` (create workflow branch); ``commit``,
``pulse_branch``, ``fast_forward``, ``head``, ``delete_branch``, ``reset`` (checkpoint and
recovery). Unset in production; never set it outside tests.
"""

from __future__ import annotations

import logging
import os
import signal

__all__ = ["CRASH_AFTER_ENV", "STEPS", "FaultInjector"]

CRASH_AFTER_ENV = "AUTARCH_GIT_CRASH_AFTER"
STEPS = ("branch", "worktree", "commit", "pulse_branch", "fast_forward", "head", "delete_branch", "reset")

log = logging.getLogger(__name__)


class FaultInjector:
    """Kills the process after the configured step; does nothing when none is configured."""

    def __init__(self, crash_after: str | None = None) -> None:
        if crash_after and crash_after not in STEPS:
            raise ValueError(f"{CRASH_AFTER_ENV}={crash_after!r}: expected one of {', '.join(STEPS)}")
        self.crash_after = crash_after or None

    @classmethod
    def from_env(cls) -> FaultInjector:
        return cls(os.environ.get(CRASH_AFTER_ENV))

    def step_done(self, step: str) -> None:
        if step == self.crash_after:
            log.warning("fault injection: killing the git service after step %r", step)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
