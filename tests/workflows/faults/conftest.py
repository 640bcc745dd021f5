"""One ``autarch up``-like system with the scripted model for every fault test, a CPU hog, and the figures
(control and faulted wall times) printed at the end of the session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from autarch.runtime.settings import Settings
from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.workflows.conftest import scripted_system

from .harness import FIGURES, CpuHog


def request_timeouts() -> dict[str, str]:
    """5 s for every service request and git step: a request that waits out its timeout shows as a few seconds'
    stall. ``AUTARCH_FAULT_TIMEOUTS=production`` runs with the defaults instead (10 s, git 120 s), where such a
    wait would break the 10 s allowance, to see whether the short timeouts hide one."""
    if os.environ.get("AUTARCH_FAULT_TIMEOUTS") == "production":
        defaults = Settings()
        return {"AUTARCH_REQUEST_TIMEOUT": str(defaults.request_timeout),
                "AUTARCH_GIT_REQUEST_TIMEOUT": str(defaults.git_request_timeout)}
    return {"AUTARCH_REQUEST_TIMEOUT": "5", "AUTARCH_GIT_REQUEST_TIMEOUT": "5"}


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("demo") as server:
        yield server


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    yield from scripted_system(tmp_path_factory, model, "faults", **request_timeouts())


@pytest.fixture(scope="module", params=["idle", "loaded"])
def load(request: pytest.FixtureRequest) -> Iterator[str]:
    """The machine as it is, then with every core kept busy by a CPU hog for the module's tests."""
    if request.param == "idle":
        yield "idle"
        return
    with CpuHog():
        yield "loaded"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("fault runs: wall time from creation to done")
        for line in FIGURES:
            terminalreporter.write_line(line)
