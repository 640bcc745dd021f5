"""The web UI in a real headless Chromium against every service as a process, the scripted model answering.

One system and one browser per module (each takes seconds to start). Chromium is Debian's ``chromium``
(``AUTARCH_CHROMIUM`` names another binary). Without it the browser tests skip, saying why, except when
``AUTARCH_REQUIRE_BROWSER=1`` (set by ``.ci/run``, which installs it): there a missing browser fails.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from autarch.services.scripted_model import ScriptedModelServer
from tests.system import System
from tests.workflows.conftest import Client, scripted_system

CHROMIUM = os.environ.get("AUTARCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"
SHOTS = DOCS_SHOTS if os.environ.get("AUTARCH_UI_SCREENSHOTS") == "docs" else \
    Path(tempfile.gettempdir()) / "autarch-ui-screenshots"
"""Where the screenshots are written: docs/ui (those of docs/ui.md) with ``AUTARCH_UI_SCREENSHOTS=docs``, else a
temporary folder, so an ordinary test run leaves the working tree as it was."""


def chromium_path() -> str:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    reason = f"no Chromium at {CHROMIUM} (apt-get install chromium, or set AUTARCH_CHROMIUM)"
    if os.environ.get("AUTARCH_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer("demo") as server:
        yield server


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    yield from scripted_system(tmp_path_factory, model, "ui", AUTARCH_PULSE_MAX_TURNS="4",
                               AUTARCH_AGENT_MAX_STEPS="10", AUTARCH_PREFLIGHT_TIMEOUT="6",
                               AUTARCH_REQUEST_TIMEOUT="30")


@pytest.fixture
def client(system: System) -> Iterator[Client]:
    c = Client(system)
    yield c
    c.http.close()


@pytest.fixture(scope="module")
def browser():
    path = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield browser
        browser.close()


def login_link(system: System, *args: str) -> str:
    """A one-time sign-in link, as ``autarch ui --print`` gives it."""
    result = system.cli("ui", "--print", "--url", system.url, *args)
    assert result.returncode == 0, result.stderr
    match = re.search(r"sign-in link[^:]*: (\S+)", result.stdout)
    assert match, result.stdout
    return match.group(1)


@pytest.fixture
def page(browser, system: System):
    """A signed-in page (its own browser context: its own cookies)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30_000)
    # A script error is a failure of the page: collected here, checked when the test ends.
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(login_link(system))
    yield page
    context.close()
    assert not errors, errors
