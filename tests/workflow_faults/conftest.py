"""One ``autarch up``-like system with the scripted model for every fault test, a CPU hog, and the figures
(control and faulted wall times) printed at the end of the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from autarch.runtime.natsserver import free_port
from autarch.services.scripted_model import ScriptedModelServer
from tests.e2e.conftest import System
from tests.workflows.conftest import SERVICES

from .harness import FIGURES, CpuHog


@pytest.fixture(scope="package")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("demo") as server:
        yield server


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    data = tmp_path_factory.mktemp("faults") / "data"
    data.mkdir()
    env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted",
           "AUTARCH_REQUEST_TIMEOUT": "5", "AUTARCH_GIT_REQUEST_TIMEOUT": "5"}
    sys_ = System(data_dir=data, port=free_port(), nats_port=free_port(), services=SERVICES, extra_env=env)
    sys_.start(timeout=60)
    yield sys_
    if sys_.proc is not None:
        sys_.stop()


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
